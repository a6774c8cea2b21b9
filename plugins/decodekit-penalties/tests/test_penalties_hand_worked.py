"""Frequency and presence penalties on a 5-token vocabulary, worked by hand."""

from __future__ import annotations

import torch

import decodekit as dk


def ctx_with(prompt: list[int], generated: list[int]) -> dk.DecodeContext:
    return dk.DecodeContext(tokens=torch.tensor([prompt + generated]), step=len(generated))


ZEROS = torch.zeros(1, 5)
PROMPT = [3, 3, 4]  # the prompt never counts
GENERATED = [0, 1, 2, 0, 0]  # counts: token 0 three times, 1 and 2 once, 3 and 4 never


def test_frequency_penalty_counts_generated_tokens_only() -> None:
    out = dk.create("frequency_penalty", penalty=2.0)(ZEROS, ctx_with(PROMPT, GENERATED))
    assert out.tolist() == [[-6.0, -2.0, -2.0, 0.0, 0.0]]  # -count * 2


def test_presence_penalty_once_per_distinct_token() -> None:
    out = dk.create("presence_penalty", penalty=1.5)(ZEROS, ctx_with(PROMPT, GENERATED))
    assert out.tolist() == [[-1.5, -1.5, -1.5, 0.0, 0.0]]


def test_frequency_then_presence_probabilities() -> None:
    # p = 0.2 each (llama.cpp's test layout), generated [0, 1, 2, 0, 0], frequency 2 and presence 2:
    # token 0 loses 3*2 + 2 = 8, tokens 1 and 2 lose 2 + 2 = 4. With Z = 2 + 2e^-4 + e^-8 = 2.0369668:
    # p0 = e^-8 / Z = 0.00016469, p1 = p2 = e^-4 / Z = 0.0089916, p3 = p4 = 1 / Z = 0.4909262.
    x = torch.full((1, 5), 0.2).log()
    out = dk.Chain.parse("frequency_penalty(2.0) | presence_penalty(2.0)").process(x, ctx_with([], GENERATED))
    expected = torch.tensor([[0.00016469, 0.0089916, 0.0089916, 0.4909262, 0.4909262]])
    assert torch.allclose(out.softmax(-1), expected, atol=1e-6)


def test_last_n_window() -> None:
    # Only the last two generated tokens, [0, 0], count.
    ctx = ctx_with(PROMPT, GENERATED)
    assert dk.create("frequency_penalty", 2.0, 2)(ZEROS, ctx).tolist() == [[-4.0, 0.0, 0.0, 0.0, 0.0]]
    assert dk.create("presence_penalty", 2.0, 2)(ZEROS, ctx).tolist() == [[-2.0, 0.0, 0.0, 0.0, 0.0]]


def test_ragged_batch_uses_generated_columns() -> None:
    # Left-padded prompts of 1 and 3 tokens; both rows generated [2, 2].
    tokens = torch.tensor([[0, 0, 4, 2, 2], [3, 3, 4, 2, 2]])
    ctx = dk.DecodeContext(tokens=tokens, prompt_lengths=torch.tensor([1, 3]), step=2)
    out = dk.create("frequency_penalty", 0.5)(torch.zeros(2, 5), ctx)
    assert out.tolist() == [[0.0, 0.0, -1.0, 0.0, 0.0]] * 2


def test_negative_penalty_encourages_and_removed_stay_removed() -> None:
    x = torch.tensor([[float("-inf"), 0.0, 0.0, 0.0, 0.0]])
    out = dk.create("frequency_penalty", -1.0)(x, ctx_with([], [0, 1]))
    assert out.tolist() == [[float("-inf"), 1.0, 0.0, 0.0, 0.0]]


def test_no_generated_tokens_is_a_no_op() -> None:
    x = torch.randn(2, 5)
    ctx = dk.DecodeContext(tokens=torch.tensor([[1, 2], [3, 4]]))
    assert torch.equal(dk.create("frequency_penalty", 1.0)(x, ctx), x)
    assert torch.equal(dk.create("presence_penalty", 1.0)(x, ctx), x)

"""Sampling chains: the same distribution as `dk.generate` (a two-sample chi-square over many seeded rows),
seeds, batch independence, and chains that cannot be speculated."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT
from decodekit_speculative.strategy import speculative
from draws import two_sample_p

import decodekit as dk
from tinymodels import Counting

PROMPT = [9, 44, 44, 44, 9, 44]  # repeats itself: prompt lookup proposes, and is sometimes right
# A penalty that reads the drafted history, a truncation, and a temperature.
CHAIN = "repetition_penalty(1.5) | top_k(6) | temperature(0.7)"
ROWS = 2000  # rows decode independently (each its own generator): one call gives ROWS seeded runs


def joint(tokens: list[list[int]]) -> Counter[tuple[int, ...]]:
    return Counter(tuple(t[:3]) for t in tokens)


@pytest.fixture(scope="module")
def plain(target: GPT) -> Counter[tuple[int, ...]]:
    return joint(dk.generate(target, [PROMPT] * ROWS, chain=CHAIN, max_new_tokens=3, seed=1).tokens)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["model", "ngram"])
def test_joint_distribution_of_three_tokens(
    target: GPT, draft: GPT, plain: Counter[tuple[int, ...]], which: str
) -> None:
    d: Any = draft if which == "model" else "ngram"
    out = speculative(target, [PROMPT] * ROWS, draft=d, k=2, ngram_size=2, chain=CHAIN, max_new_tokens=3, seed=2)
    assert sum(out.accepted) > 0.1 * sum(out.drafted)  # the rule both accepts and rejects
    assert sum(out.accepted) < sum(out.drafted)
    assert two_sample_p(joint(out.tokens), plain) > 1e-3


@pytest.mark.slow
def test_the_chi_square_can_fail(draft: GPT, plain: Counter[tuple[int, ...]]) -> None:
    """The draft's own distribution differs from the target's, and the test above would see it."""
    wrong = joint(dk.generate(draft, [PROMPT] * ROWS, chain=CHAIN, max_new_tokens=3, seed=3).tokens)
    assert two_sample_p(wrong, plain) < 1e-6


def test_same_seed_same_output_and_rows_independent(target: GPT, draft: GPT) -> None:
    prompts = [PROMPT, [7], [90, 1, 33, 4]]
    kwargs: dict[str, Any] = {"draft": draft, "k": 3, "chain": CHAIN, "max_new_tokens": 16}
    a = speculative(target, prompts, seed=[11, 12, 13], **kwargs)
    assert speculative(target, prompts, seed=[11, 12, 13], **kwargs).tokens == a.tokens
    assert speculative(target, prompts, seed=[11, 99, 13], **kwargs).tokens[1] != a.tokens[1]
    for b, p in enumerate(prompts):  # alone, or in another batch, a row samples the same tokens
        assert speculative(target, [p], seed=[11 + b], **kwargs).tokens[0] == a.tokens[b]
    other = speculative(target, [[3, 3, 3], prompts[1], PROMPT], seed=[5, 12, 6], **kwargs)
    assert other.tokens[1] == a.tokens[1]


def test_stateful_stages_refused(target: GPT) -> None:
    with pytest.raises(dk.ParameterError, match=r"mirostat_v2\(.*does not declare"):
        speculative(target, [PROMPT], draft="ngram", chain="mirostat_v2", max_new_tokens=4)
    with pytest.raises(dk.ParameterError, match="counting keeps state across steps"):
        speculative(target, [PROMPT], draft="ngram", chain=dk.Chain([Counting()]), max_new_tokens=4)

    def custom(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits.argmax(-1)

    with pytest.raises(dk.ParameterError, match="selector custom does not declare"):
        speculative(target, [PROMPT], draft="ngram", chain=dk.Chain([], selector=custom), max_new_tokens=4)


def test_stateless_custom_processor_and_gumbel(target: GPT, draft: GPT) -> None:
    def ban_two(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits.index_fill(1, torch.tensor([2]), float("-inf"))

    out = speculative(target, [PROMPT], draft=draft, chain=dk.Chain([ban_two]), max_new_tokens=12, seed=0)
    assert 2 not in out.tokens[0]
    out = speculative(target, [PROMPT], draft=draft, chain="temperature(0.7) | gumbel", max_new_tokens=12, seed=0)
    assert len(out.tokens[0]) == 12


@pytest.mark.slow
def test_the_chi_square_sees_a_wrong_residual(
    target: GPT, draft: GPT, plain: Counter[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The classic mistake, drawing from p instead of max(0, p - q) after a rejection, is detected."""
    import decodekit_speculative.rejection as rejection

    def residual_is_p(drafts: Any, draft_probs: Any, p_at: Any, uniform: Any) -> tuple[int, int]:
        for j, x in enumerate(drafts):
            p, q = p_at(j), draft_probs[j]
            q_x = 1.0 if q is None else float(q[x])
            if float(uniform()) * q_x < float(p[x]):
                continue
            return j, rejection.draw(p, uniform())
        return len(drafts), rejection.draw(p_at(len(drafts)), uniform())

    monkeypatch.setattr("decodekit_speculative.strategy.verify_softmax", residual_is_p)
    out = speculative(target, [PROMPT] * ROWS, draft=draft, k=2, chain=CHAIN, max_new_tokens=3, seed=2)
    assert two_sample_p(joint(out.tokens), plain) < 1e-3

"""The adaptive samplers in the decode loop: Mirostat's and adaptive-p's state starts afresh each generation, rows
stay apart."""

from __future__ import annotations

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=1, n_head=2, n_embd=16)).eval()


PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]


@pytest.mark.parametrize("text", ["mirostat(3.0, 0.5)", "mirostat_v2(3.0, 0.5)", "adaptive_p(0.2, 0.5)"])
def test_selector_state_resets_each_generation(text: str) -> None:
    model, chain = tiny_gpt(), dk.Chain.parse(text)
    first = dk.generate(model, PROMPTS, chain=chain, max_new_tokens=12, cache="none", seed=3)
    second = dk.generate(model, PROMPTS, chain=chain, max_new_tokens=12, cache="none", seed=3)
    assert first.tokens == second.tokens  # same chain object: mu started at 2 * tau both times


def test_first_row_alone_equals_the_first_row_of_a_ragged_batch() -> None:
    # Row 0's generator comes from (seed, row 0) whatever the batch; its state (mu, the average) is its own.
    model = tiny_gpt()
    selectors = ("mirostat(3.0, 0.5)", "mirostat_v2(3.0, 0.5)", "adaptive_p(0.2, 0.5)")
    for text in (*selectors, "dynamic_temperature(1.0, 0.5) | gumbel"):
        batch = dk.generate(model, PROMPTS, chain=text, max_new_tokens=12, cache="none", seed=5)
        alone = dk.generate(model, PROMPTS[:1], chain=text, max_new_tokens=12, cache="none", seed=5)
        assert alone.tokens[0] == batch.tokens[0], text

"""Per-prompt `max_new_tokens` past the context in slots, within it in positions: a short prompt with a long limit
beside a long prompt with a short one. Each row is left-padded and starts at position 0, so each fits the model
alone; the batch must be decoded, and every row equal itself decoded alone (and transformers' `generate()`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_hf import HFModel

import decodekit as dk
from tinymodels import greedy_generation_config

CONTEXT = 32
LONG, SHORT = list(range(3, 3 + CONTEXT - 4)), [7, 8]  # 28 tokens, then 2
LIMITS = [3, CONTEXT - 6]  # reaches: 31 and 28 positions; slots: 28 + 26 = 54


def _build(name: str, build_arch: Any) -> Any:
    """Learned absolute positions (GPT-2), rotary (Llama), rotary with sliding-window layers (Mistral)."""
    window = {"sliding_window": 8, "num_key_value_heads": 2} if name == "mistral" else {}
    return build_arch(name, max_position_embeddings=CONTEXT, **window)


def _hf_alone(hf: Any, prompt: list[int], new: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = hf.generate(
        ids, attention_mask=torch.ones_like(ids), generation_config=greedy_generation_config(max_new_tokens=new)
    )
    return list(out[0, len(prompt) :].tolist())


@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral"])
@pytest.mark.parametrize("cache", ["dense", "gqa", "window(size=8, sinks=0)"])
def test_each_row_within_the_context_is_decoded_as_alone(name: str, cache: str, build_arch: Any) -> None:
    hf = _build(name, build_arch)
    model = HFModel(hf)
    assert model.spec.max_positions == CONTEXT
    out = dk.generate(model, [LONG, SHORT], max_new_tokens=LIMITS, chain="greedy", cache=cache, stop_tokens=[])
    for prompt, limit, tokens in zip([LONG, SHORT], LIMITS, out.tokens):
        alone = dk.generate(model, [prompt], max_new_tokens=limit, chain="greedy", cache=cache, stop_tokens=[])
        assert tokens == alone.tokens[0]
        if cache != "window(size=8, sinks=0)" or name == "mistral":  # its own window: transformers' masks
            assert tokens == _hf_alone(hf, prompt, limit)


def test_a_row_past_the_context_is_refused_naming_it(build_arch: Any) -> None:
    model = HFModel(_build("gpt2", build_arch))
    with pytest.raises(dk.ContextLengthError) as info:
        dk.generate(model, [LONG, SHORT], max_new_tokens=[3, CONTEXT - 1], chain="greedy")
    assert str(info.value).startswith(
        f"prompt 1 of 2 tokens + max_new_tokens[1]={CONTEXT - 1} = {CONTEXT + 1} tokens exceeds the model's context "
        f"of {CONTEXT} positions"
    )

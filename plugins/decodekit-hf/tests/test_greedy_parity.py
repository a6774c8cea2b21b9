"""Greedy decoding through `HFModel` gives exactly transformers' own `generate(do_sample=False)` tokens,
for GPT-2, a grouped-query Llama and the trained one, one prompt and a ragged batch, with each cache
backend and none; an evicting cache that has evicted nothing yet (decodekit's attention function) too."""

from __future__ import annotations

from typing import Any

import pytest
from decodekit_hf import HFModel

import decodekit as dk

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]
NEW = 64


@pytest.fixture(scope="module")
def reference(hf_model: Any, gen_config: Any, left_pad: Any) -> dict[str, list[list[int]]]:
    """transformers' greedy tokens: the first prompt alone, and all prompts left-padded in one batch."""
    out = {}
    for name, prompts in (("single", PROMPTS[:1]), ("ragged", PROMPTS)):
        ids, mask = left_pad(prompts)
        generated = hf_model.generate(ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=NEW))
        out[name] = generated[:, ids.shape[1] :].tolist()
    return out


@pytest.mark.parametrize("cache", ["dense", "gqa", "none", "window(size=80, sinks=2)", "h2o(budget=80)"])
@pytest.mark.parametrize("batch", ["single", "ragged"])
def test_greedy_tokens_equal_transformers(
    hf_model: Any, reference: dict[str, list[list[int]]], cache: str, batch: str
) -> None:
    prompts = PROMPTS[:1] if batch == "single" else PROMPTS
    out = dk.generate(HFModel(hf_model), prompts, chain="greedy", max_new_tokens=NEW, cache=cache)
    assert out.tokens == reference[batch]
    assert all(len(t) == NEW for t in out.tokens)
    assert len(set(map(tuple, out.tokens))) == len(prompts)  # the rows really differ: padding is handled per row

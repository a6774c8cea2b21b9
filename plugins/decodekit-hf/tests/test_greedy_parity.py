"""Greedy decoding through `HFModel` gives exactly transformers' own `generate(do_sample=False)` tokens,
for GPT-2, a grouped-query Llama and the trained one, one prompt and a ragged batch, with each cache
backend and none; an evicting cache that has evicted nothing yet (decodekit's attention function) too.
The same, shorter, on the other architectures of `conftest.ARCHS`; where decodekit's attention cannot
serve one (a text past sliding-window layers), an evicting cache is refused naming the reason."""

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


ARCH_NEW = 24
CACHES = ["dense", "gqa", "none", "window(size=80, sinks=2)", "h2o(budget=80)"]
# Architectures whose attention decodekit's attention function cannot serve, and why the refusal says so: their
# window of 4 (Gemma 2's eager softcapping is served, test_eager_attention.py).
REFUSES_EVICTING = {"gemma2": r"sliding-window layers", "gemma3_text": r"sliding-window layers"}


@pytest.fixture(scope="module")
def arch_reference(arch_model: tuple[str, Any], gen_config: Any, left_pad: Any) -> dict[str, list[list[int]]]:
    out = {}
    for name, prompts in (("single", PROMPTS[:1]), ("ragged", PROMPTS)):
        ids, mask = left_pad(prompts)
        config = gen_config(max_new_tokens=ARCH_NEW)
        generated = arch_model[1].generate(ids, attention_mask=mask, generation_config=config)
        out[name] = generated[:, ids.shape[1] :].tolist()
    return out


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("batch", ["single", "ragged"])
def test_greedy_tokens_equal_transformers_on_other_architectures(
    arch_model: tuple[str, Any], arch_reference: dict[str, list[list[int]]], cache: str, batch: str
) -> None:
    """StableLM and Nemotron drop the keywords their decoder layers get: the evicting caches attended by
    transformers' code there, past the padding (wrong tokens, ragged) or into a shape error (Falcon, h2o)."""
    arch, hf = arch_model
    prompts = PROMPTS[:1] if batch == "single" else PROMPTS
    model = HFModel(hf)
    if arch in REFUSES_EVICTING and cache[0] in "wh":
        with pytest.raises(dk.ParameterError, match=REFUSES_EVICTING[arch] + r".*allowed: "):
            dk.generate(model, prompts, chain="greedy", max_new_tokens=ARCH_NEW, cache=cache)
        return
    out = dk.generate(model, prompts, chain="greedy", max_new_tokens=ARCH_NEW, cache=cache)
    assert out.tokens == arch_reference[batch]
    assert len(set(map(tuple, out.tokens))) == len(prompts)

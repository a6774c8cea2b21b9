"""The architectures users run, each a tiny random model built from its config, against transformers' own
`generate()`: greedy tokens (one prompt and a left-padded ragged batch) with `dense`, `gqa`, a sliding-window
model's own window (`window(size=W, sinks=0)` on its sliding layers) and a scored cache before it evicts; a
sampled chain's distribution at every step (decodekit's `logprobs` against `generate()`'s `output_scores` on the
same text); `prompt_logprobs` against a full forward's log_softmax. Gemma 2, VaultGemma (soft-capped logits) and
gpt-oss (sink logits) run eager attention in transformers, through the cache the same terms. Where decodekit's
attention cannot serve a cache (a scored cache past a sliding window) the refusal is checked instead."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel

import decodekit as dk
from tinymodels import assert_sampled_chain_sees_generate

V = 256
WINDOW = 6  # the sliding window of the models that have one: far shorter than the texts below
CONTEXT = 64
LAYERS = 2  # conftest's tiny models: 2 layers, 4 heads of 8 dimensions (2 kv-heads where the real model has fewer)
SHARED: dict[str, Any] = dict(
    vocab_size=V, max_position_embeddings=CONTEXT, bos_token_id=V - 1, eos_token_id=V - 1, pad_token_id=V - 1
)
_SLIDES = dict(sliding_window=WINDOW)
_GEMMA = dict(num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8)  # as conftest's Gemma 2
# gpt-oss: 4 experts, and its yarn stretched from 2 positions to this context (its 4096 x 32 would warn that the
# factor disagrees)
_GPT_OSS = dict(num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2) | dict(
    rope_parameters=dict(rope_type="yarn", factor=32.0, rope_theta=150000.0, original_max_position_embeddings=2)
)
# model_type -> its config fields besides conftest's (`make_arch`), and the layers that slide (None: no window).
ARCHS: dict[str, tuple[dict[str, Any], tuple[int, ...] | None]] = {
    "qwen2": (_SLIDES | dict(use_sliding_window=True, max_window_layers=1), (1,)),  # layer 0 global, layer 1 slides
    "qwen3": ({}, None),
    "gemma2": (_SLIDES, (0,)),  # eager attention, softcapping; layers sliding and global by turns
    "vaultgemma": (_SLIDES | _GEMMA, (0,)),  # Gemma 2's attention (eager, softcapping)
    "gpt_oss": (_SLIDES | _GPT_OSS, (0,)),  # eager attention with a sink logit per head
    "gemma3_text": (_SLIDES | dict(layer_types=["sliding_attention", "full_attention"]), (0,)),
    "olmo2": ({}, None),
    "starcoder2": (_SLIDES, (0, 1)),
    "gptj": ({}, None),
    "opt": ({}, None),
    "mixtral": (_SLIDES, (0, 1)),
    "cohere": (dict(logit_scale=1.0), None),  # its default 0.0625 leaves these tiny logits nearly uniform
    "phi": ({}, None),  # phi-2: partial rotary embedding (partial_rotary_factor=0.5)
}
PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60, 200, 31], [7, 8], [83, 1, 33, 33, 12]]
BATCHES = {"single": PROMPTS[:1], "ragged": PROMPTS}
NEW = 12  # every text passes the window of 6


def make(build_arch: Callable[..., Any], model_type: str) -> Any:
    return build_arch(model_type, **(SHARED | ARCHS[model_type][0]))


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch(request: pytest.FixtureRequest, build_arch: Any, hf_greedy: Any) -> tuple[str, Any, dict[str, Any]]:
    """(model_type, model, transformers' greedy tokens per batch)."""
    model = make(build_arch, request.param)
    greedy = hf_greedy(model, BATCHES, NEW)
    return request.param, model, greedy


def own_window(model_type: str) -> str:
    """The `window` cache that masks as the model does: the window on its sliding layers, the context elsewhere;
    on a model without a sliding window, one that holds the whole text (nothing evicted)."""
    sliding = ARCHS[model_type][1]
    if sliding is None:
        return f"window(size={CONTEXT - 2}, sinks=2)"
    sizes = [WINDOW if layer in sliding else CONTEXT for layer in range(LAYERS)]
    return f"window(size={sizes if len(set(sizes)) > 1 else WINDOW}, sinks=0)"  # as the refusals spell it


# The reason each refusal names: a scored cache cannot follow a window.
SLIDING = r"sliding-window layers \(sliding_window=6\)"


def refusal(model_type: str, cache: str) -> str | None:
    if cache in ("dense", "gqa"):
        return None
    scored = not cache.startswith("window")
    return SLIDING if scored and ARCHS[model_type][1] is not None else None


def decode(model_type: str, hf: Any, prompts: list[list[int]], cache: str, **options: Any) -> dk.Generation | None:
    """`dk.generate` through `HFModel`, or None where the cache is refused (checked: the error names why)."""
    why = refusal(model_type, cache)
    if why is None:
        return dk.generate(HFModel(hf), prompts, cache=cache, **options)
    allowed = re.escape(own_window(model_type)) if why == SLIDING else ""  # the refusal spells the model's window
    with pytest.raises(dk.ParameterError, match=why + r".*allowed: .*" + allowed):
        dk.generate(HFModel(hf), prompts, cache=cache, **options)
    return None


@pytest.mark.parametrize("cache", ["dense", "gqa", "own_window", "h2o(budget=40)", "snapkv(budget=40)"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_greedy_tokens_equal_generate(arch: tuple[str, Any, dict[str, Any]], cache: str, batch: str) -> None:
    model_type, hf, greedy = arch
    name = own_window(model_type) if cache == "own_window" else cache
    out = decode(model_type, hf, BATCHES[batch], name, chain="greedy", max_new_tokens=NEW)
    if out is not None:
        assert out.tokens == greedy[batch]
        assert len({tuple(t) for t in out.tokens}) == len(BATCHES[batch])  # the rows differ: padding is per row


@pytest.mark.parametrize(
    "cache", ["window(size=7, sinks=0)", "window(size=6, sinks=1)", "window(size=[6, 5], sinks=0)"]
)
def test_a_window_wider_than_the_models_is_refused(build_arch: Any, cache: str) -> None:
    """Starcoder2 slides a window of 6 on both layers: a cache that would show a query a key further back (a wider
    window, a sink) is refused; one within it on every layer (the last) is served."""
    hf = make(build_arch, "starcoder2")
    if cache.endswith("[6, 5], sinks=0)"):
        assert len(dk.generate(HFModel(hf), PROMPTS, cache=cache, max_new_tokens=NEW).tokens[0]) == NEW
        return
    with pytest.raises(dk.ParameterError, match=SLIDING + r".*allowed: .*window\(size=6, sinks=0\)"):
        dk.generate(HFModel(hf), PROMPTS, cache=cache, max_new_tokens=NEW)


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_a_sampled_chain_sees_generates_distribution(arch: tuple[str, Any, dict[str, Any]], batch: str) -> None:
    """At each step of a seeded decode, the chain's kept tokens and their log-probabilities (top 20: all that
    `top_k(20)` leaves) and the model's raw ones are `generate()`'s with the same processors, on the same text."""
    model_type, hf, _ = arch
    assert_sampled_chain_sees_generate(hf, HFModel(hf), BATCHES[batch], model_type)


@pytest.mark.parametrize("cache", ["dense", "own_window"])
@torch.no_grad()
def test_prompt_logprobs_equal_a_full_forward(arch: tuple[str, Any, dict[str, Any]], cache: str) -> None:
    model_type, hf, _ = arch
    name = own_window(model_type) if cache == "own_window" else cache
    out = decode(model_type, hf, PROMPTS, name, max_new_tokens=0, prompt_logprobs=3)
    if out is None:
        return
    assert out.prompt_logprobs is not None
    for prompt, got in zip(PROMPTS, out.prompt_logprobs):
        lp = torch.log_softmax(hf(torch.tensor([prompt])).logits[0].float(), -1)
        want = lp[torch.arange(len(prompt) - 1), prompt[1:]]
        assert got[0] is None  # the others are set: a first token alone has no score
        assert [g.logprob for g in got[1:]] == pytest.approx(want.tolist(), abs=1e-5)  # type: ignore[union-attr]
        assert [[i for i, _ in g.top] for g in got[1:]] == lp[:-1].topk(3).indices.tolist()  # type: ignore[union-attr]
        assert [g.rank for g in got[1:]] == ((lp[:-1] > want[:, None]).sum(-1) + 1).tolist()  # type: ignore[union-attr]


# What a cache that evicts past the context is told about each model's positions (None: decodekit re-rotates its
# keys, from `rope_base` or `rope_frequencies`).
POSITIONS = {
    "qwen2": None,
    "qwen3": None,
    "olmo2": None,
    "starcoder2": None,
    "mixtral": None,
    "gemma2": "its rotary embedding (gemma2's own layout)",
    "vaultgemma": "its rotary embedding (vaultgemma's own layout)",
    "gpt_oss": "its rotary embedding (gpt_oss's own layout)",
    "gemma3_text": None,  # a rotary embedding per layer type: refused, saying so, until rope_frequencies
    "gptj": "its rotary embedding (gptj's own layout)",
    "cohere": "its rotary embedding (cohere's own layout)",
    "phi": "its rotary embedding (phi's own layout)",  # rotate-half over half the head
    "opt": "its positions are absolute (not rotary)",
}


@pytest.mark.parametrize("model_type", sorted(POSITIONS))
def test_a_window_past_the_context_names_the_models_positions(build_arch: Any, model_type: str) -> None:
    """Gemma 3 (a rotary base per layer type) and GPT-J (`rotary_dim`, no rope_theta) were said to have absolute
    positions; a model whose keys decodekit re-rotates goes past its context."""
    hf = make(build_arch, model_type)
    cache = "window(size=4, sinks=0)" if ARCHS[model_type][1] is not None else "window(size=4, sinks=2)"
    if POSITIONS[model_type] is None:
        out = dk.generate(HFModel(hf), [[1, 2, 3]], max_new_tokens=CONTEXT, cache=cache)
        assert len(out.tokens[0]) == CONTEXT
        return
    with pytest.raises(dk.ContextLengthError) as info:
        dk.generate(HFModel(hf), [[1, 2, 3]], max_new_tokens=CONTEXT, cache=cache)
    assert f"positions, and {POSITIONS[model_type]}" in str(info.value)

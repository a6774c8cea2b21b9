"""The architectures of 2026 (transformers 5.25), each a tiny random model built from its config, against
transformers' own `generate()`, as test_architectures.py does for the older ones: greedy tokens (one prompt and a
left-padded ragged batch) with `dense`, `gqa`, the model's own window where it has one and a scored cache; where
decodekit cannot follow the model's mask the refusal is checked instead. Served: sink-logit models on eager
attention (Granite SWA, Granite-MoE SWA, Flint), Gemma 4 text (its layers of one shape), SmolLM3 and Llama 4 text
(NoPE layers; Llama 4's chunked attention), GLM-4, Granite, Phi-3, Qwen3-MoE. Refused, naming the architecture
and what is served: latent attention (DeepSeek V3, HY V4), compressed attention (DeepSeek V4), values of another
width or layers of other shapes (MiMo-V2-Flash, a Gemma 4 whose global layers are wider), linear-attention and
state-space layers (Qwen3-Next, Jamba, Falcon-H1, Mamba)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from decodekit_hf import HFModel
from decodekit_hf.model import model_spec
from transformers import AutoConfig

import decodekit as dk

# test_architectures.py's texts and sizes: a vocabulary of 256, a context of 64, a window of 6 that the texts pass
V, CONTEXT, WINDOW, NEW, LAYERS = 256, 64, 6, 12, 2
SHARED: dict[str, Any] = dict(
    vocab_size=V, max_position_embeddings=CONTEXT, bos_token_id=V - 1, eos_token_id=V - 1, pad_token_id=V - 1
)
PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60, 200, 31], [7, 8], [83, 1, 33, 33, 12]]
BATCHES = {"single": PROMPTS[:1], "ragged": PROMPTS}
_KV = dict(num_key_value_heads=2, head_dim=8)
_SLIDE_FIRST = dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])
_EXPERTS = dict(num_experts_per_tok=2, moe_intermediate_size=16)
# model_type -> (its config fields besides conftest's, the layers whose mask decodekit's attention cannot follow past
# WINDOW tokens, and the kind of layer they are: sliding (the model's own `window` cache follows it) or chunked).
ARCHS: dict[str, tuple[dict[str, Any], tuple[int, ...], str | None]] = {
    "granite_swa": (_KV | _SLIDE_FIRST, (0,), "sliding"),  # eager attention with a sink logit per head
    "granitemoe_swa": (_KV | _SLIDE_FIRST | dict(num_local_experts=4, num_experts_per_tok=2), (0,), "sliding"),
    # sinks; its full-attention layers have no rotary embedding (NoPE)
    "flint": (_KV | _SLIDE_FIRST | _EXPERTS | dict(num_experts=4, shared_expert_intermediate_size=16), (0,), "sliding"),
    # per-layer inputs, value norms, a `per_layer_config` (its global layers as wide as the sliding ones here)
    "gemma4_text": (
        _KV | _SLIDE_FIRST | dict(global_head_dim=8, hidden_size_per_layer_input=8, vocab_size_per_layer_input=256),
        (0,),
        "sliding",
    ),
    "smollm3": (_KV | dict(no_rope_layer_interval=2), (), None),  # layer 1 without rotary embedding (NoPE)
    # layer 0 chunked (rotary), layer 1 global NoPE with its query temperature (floor_scale=4: it bites here)
    "llama4_text": (
        _KV
        | dict(attention_chunk_size=WINDOW, no_rope_layer_interval=2, floor_scale=4, attn_scale=0.5)
        | dict(num_local_experts=4, intermediate_size_mlp=64),
        (0,),
        "chunked",
    ),
    "glm4": (_KV, (), None),  # partial, interleaved rotary embedding
    # its multipliers, none 1: the attention's scale is `attention_multiplier`, not 1/sqrt(head_dim)
    "granite": (
        _KV | dict(embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.0),
        (),
        None,
    ),
    "phi3": (_KV, (), None),
    "qwen3_moe": (_KV | _EXPERTS | dict(num_experts=4), (), None),
}
CACHES = ["dense", "gqa", "own_window", "h2o(budget=40)", "snapkv(budget=40)"]


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch(request: pytest.FixtureRequest, build_arch: Any, hf_greedy: Any) -> tuple[str, Any, dict[str, Any]]:
    """(model_type, model, transformers' greedy tokens per batch)."""
    model = build_arch(request.param, **(SHARED | ARCHS[request.param][0]))
    greedy = hf_greedy(model, BATCHES, NEW)
    return request.param, model, greedy


def own_window(model_type: str) -> str:
    """The `window` cache that masks as a sliding model does; on another model one that holds the whole text."""
    _, layers, kind = ARCHS[model_type]
    if kind != "sliding":
        return f"window(size={CONTEXT - 2}, sinks=2)"
    sizes = [WINDOW if layer in layers else CONTEXT for layer in range(LAYERS)]
    return f"window(size={sizes}, sinks=0)"


def refusal(model_type: str, cache: str) -> str | None:
    """What the error says where decodekit's attention cannot follow the model's mask over these texts, or None."""
    kind = ARCHS[model_type][2]
    if cache in ("dense", "gqa") or kind is None or (kind == "sliding" and cache.startswith("window")):
        return None
    if kind == "sliding":
        return rf"sliding-window layers \(sliding_window={WINDOW}\).*allowed: .*" + re.escape(own_window(model_type))
    return rf"chunked-attention layers \(attention_chunk_size={WINDOW}\).*allowed: a text of at most {WINDOW} tokens"


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_greedy_tokens_equal_generate(arch: tuple[str, Any, dict[str, Any]], cache: str, batch: str) -> None:
    model_type, hf, greedy = arch
    name = own_window(model_type) if cache == "own_window" else cache
    why = refusal(model_type, name)
    if why is not None:
        with pytest.raises(dk.ParameterError, match=why):
            dk.generate(HFModel(hf), BATCHES[batch], cache=name, chain="greedy", max_new_tokens=NEW)
        return
    out = dk.generate(HFModel(hf), BATCHES[batch], cache=name, chain="greedy", max_new_tokens=NEW)
    assert out.tokens == greedy[batch]
    assert len({tuple(t) for t in out.tokens}) == len(BATCHES[batch])  # the rows differ: padding is per row


# Past the context an evicting cache goes on where decodekit re-rotates the keys (Llama's rotary embedding on every
# layer); elsewhere it is refused up front, naming the positions: NoPE layers (SmolLM3, Flint, Llama 4), a base
# per layer (Gemma 4, Granite SWA's `layer_rope_theta`), GLM-4's partial interleaved rotation.
RE_ROTATED = ("granite", "phi3", "qwen3_moe")


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_a_window_past_the_context_goes_on_only_where_keys_are_re_rotated(build_arch: Any, model_type: str) -> None:
    hf = build_arch(model_type, **(SHARED | ARCHS[model_type][0]))
    cache = "window(size=4, sinks=0)" if ARCHS[model_type][2] == "sliding" else "window(size=4, sinks=2)"
    if model_type in RE_ROTATED:
        assert len(dk.generate(HFModel(hf), [[1, 2, 3]], max_new_tokens=CONTEXT, cache=cache).tokens[0]) == CONTEXT
        return
    with pytest.raises(dk.ContextLengthError, match=r"its rotary embedding .*not supported for re-rotating kept keys"):
        dk.generate(HFModel(hf), [[1, 2, 3]], max_new_tokens=CONTEXT, cache=cache)


# A window (chunk) as long as the context: the texts fit it, so its layers mask nothing and every cache is served.
WITHIN = {"gemma4_text": dict(sliding_window=CONTEXT), "llama4_text": dict(attention_chunk_size=CONTEXT)}


@pytest.mark.parametrize("model_type", sorted(WITHIN))
def test_a_text_within_the_window_or_chunk_takes_any_cache(build_arch: Any, hf_greedy: Any, model_type: str) -> None:
    """Before they evict, the scored caches and a `window` with sinks give `generate()`'s tokens."""
    hf = build_arch(model_type, **(SHARED | ARCHS[model_type][0] | WITHIN[model_type]))
    greedy = hf_greedy(hf, {"ragged": PROMPTS}, NEW)["ragged"]
    for cache in ("h2o(budget=40)", "snapkv(budget=40)", "window(size=30, sinks=2)"):
        assert dk.generate(HFModel(hf), PROMPTS, cache=cache, chain="greedy", max_new_tokens=NEW).tokens == greedy


# Models whose last 2 of 4 layers attend over an earlier layer's keys (`num_kv_shared_layers`): Gemma 3n, and the
# small Gemma 4 checkpoints (E2B, E4B); a window as long as the context, so only the sharing is in question.
SHARING = dict(num_hidden_layers=4, num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 2)
SHARING_MODELS = {
    "gemma4_text": ARCHS["gemma4_text"][0] | SHARING | dict(sliding_window=CONTEXT),
    "gemma3n_text": _KV | SHARING | dict(sliding_window=CONTEXT) | dict(hidden_size_per_layer_input=8),
}


@pytest.mark.parametrize("model_type", sorted(SHARING_MODELS))
def test_layers_that_share_keys_refuse_an_evicting_cache(build_arch: Any, hf_greedy: Any, model_type: str) -> None:
    """A shared layer attends over the keys its source layer's `cache.update` returned, which a cache written by
    decodekit's attention does not hand back: the error named `n_layers` of a `ModelSpec` the user never wrote. It
    names the shared layers now; a cache that keeps every token gives `generate()`'s tokens."""
    hf = build_arch(model_type, **(SHARED | dict(vocab_size_per_layer_input=V) | SHARING_MODELS[model_type]))
    greedy = hf_greedy(hf, {"ragged": PROMPTS}, NEW)["ragged"]
    assert dk.generate(HFModel(hf), PROMPTS, cache="gqa", chain="greedy", max_new_tokens=NEW).tokens == greedy
    for cache in ("h2o(budget=40)", "window(size=30, sinks=2)"):
        with pytest.raises(
            dk.ParameterError,
            match=r"model.s last 2 layers \(num_kv_shared_layers=2\) attend over all of an "
            r"earlier layer's keys.*allowed: a cache that keeps every token",
        ):
            dk.generate(HFModel(hf), PROMPTS, cache=cache, chain="greedy", max_new_tokens=NEW)


_LATENT = dict(kv_lora_rank=8, q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8)
# model_type -> (config fields besides conftest's, what the refusal at load says)
REFUSED_AT_LOAD: dict[str, tuple[dict[str, Any], str]] = {
    "deepseek_v3": (
        _LATENT | dict(n_routed_experts=4, n_group=1, topk_group=1),
        r"DeepseekV3Config is not served: its "
        r"multi-head latent attention \(kv_lora_rank=8\)",
    ),
    "hy_v4": ({}, r"HYV4Config is not served: its multi-head latent attention \(kv_lora_rank=512\)"),
    "deepseek_v4": ({}, r"layer type 'heavily_compressed_attention' of DeepseekV4Config is not served"),
    "mimo_v2_flash": (
        _KV | _SLIDE_FIRST | dict(v_head_dim=4),
        r"MiMoV2FlashConfig is not served: its values have v_head_dim=4 dimensions, its keys head_dim=8",
    ),
    "gemma4_text": (
        _KV | _SLIDE_FIRST | dict(global_head_dim=16),
        r"Gemma4TextConfig is not served: its layers differ in head_dim \(8 on layer 0, 16 on layer 1\)",
    ),
    "qwen3_next": (_KV, r"layer type 'linear_attention' of Qwen3NextConfig is not served"),
    "jamba": ({}, r"layer type 'linear_attention' of JambaConfig is not served"),
    "falcon_h1": ({}, r"layer type 'hybrid' of FalconH1Config is not served"),
    "mamba": ({}, r"MambaConfig is not served: it has no attention heads"),
}


@pytest.mark.parametrize("model_type", sorted(REFUSED_AT_LOAD))
def test_a_model_whose_state_decodekit_caches_cannot_hold_is_refused_at_load(model_type: str) -> None:
    """`HFModel` reads the spec first (`model_spec`): the config alone is refused, naming the architecture and what
    is served (Gemma 4 was an AmbiguousGlobalPerLayerAttributeError from transformers, MiMo a shape error later)."""
    fields, message = REFUSED_AT_LOAD[model_type]
    config = AutoConfig.for_model(model_type, **(SHARED | dict(num_hidden_layers=LAYERS, hidden_size=32) | fields))
    with pytest.raises(dk.ParameterError, match=message + r".*allowed: "):
        model_spec(config)


def test_layers_that_cache_other_shapes_are_refused_at_first_use(build_arch: Any) -> None:
    """MiMo-V2-Flash's sliding layers cache twice the kv-heads its config states (its full layers as many): the
    first forward's keys say so, naming the layer and the shapes, before a cache is written."""
    hf = build_arch(
        "mimo_v2_flash", **(SHARED | _KV | _SLIDE_FIRST | dict(v_head_dim=8, n_routed_experts=4) | _EXPERTS)
    )
    with pytest.raises(
        dk.ParameterError,
        match=r"layer 0 of MiMoV2FlashForCausalLM caches keys of 4 kv-heads .*"
        r"allowed: a model whose every layer caches num_key_value_heads=2 kv-heads",
    ):
        dk.generate(HFModel(hf), BATCHES["single"], cache="dense", max_new_tokens=2)

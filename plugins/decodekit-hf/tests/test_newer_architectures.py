"""The architectures of 2026 (transformers 5.25), each a tiny random model built from its config, against
transformers' own `generate()`, as test_architectures.py does for the older ones: greedy tokens (one prompt and a
left-padded ragged batch) with `dense`, `gqa`, the model's own window where it has one and a scored cache; where
decodekit cannot follow the model's mask the refusal is checked instead. Served: sink-logit models on eager
attention (Granite SWA, Granite-MoE SWA, Flint), Gemma 4 text, SmolLM3 and Llama 4 text (NoPE layers; Llama 4's
chunked attention), GLM-4, Granite, Phi-3, Qwen3-MoE, multi-head latent attention (DeepSeek V2 and V3: caches that
keep every token, `int8` too), values narrower than keys (MiMo-V2-Flash), layers that cache other shapes
(`layer_shapes`: a Gemma 4 whose full-attention layers are wider, with fewer kv-heads under `attention_k_eq_v`, and
with its last layers sharing an earlier layer's keys as E2B/E4B do; MiMo-V2-Flash's sliding layers, twice the
kv-heads: refused until 2026-12-05). Refused, naming the architecture and what is served: a sparse-attention indexer
(HY V4, DeepSeek V3.2), compressed attention (DeepSeek V4), linear-attention and state-space layers (Qwen3-Next,
Jamba, Falcon-H1, Mamba)."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import replace
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel
from decodekit_hf.model import model_spec
from decodekit_speculative.strategy import SpeculativeGeneration
from torch import Tensor
from transformers import AutoConfig, DynamicCache

import decodekit as dk
from tinymodels import assert_sampled_chain_sees_generate, greedy_generation_config, int8_round_trip, left_padded

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
# Multi-head latent attention: each layer caches one latent per token, "keys" of kv_lora_rank dims and "values" (its
# rotary keys) of qk_rope_head_dim (`CacheSpec.value_dim`), and attends over keys and values expanded from them.
_LATENT = dict(kv_lora_rank=8, q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8)
_DEEPSEEK = _LATENT | _EXPERTS | dict(n_routed_experts=4, n_group=1, topk_group=1)
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
    # latent attention: V3 with its low-rank queries and interleaved rotary embedding, V2 with full-rank queries
    "deepseek_v3": (_DEEPSEEK, (), "latent"),
    "deepseek_v2": (_DEEPSEEK | dict(q_lora_rank=None), (), "latent"),
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
    if kind == "latent":
        return LATENT_REFUSAL
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
# layer, by each layer type's frequencies: Gemma 4's, refused until `rope_frequencies`); elsewhere it is refused up
# front, naming the positions: NoPE layers (SmolLM3, Flint, Llama 4), Granite SWA's `layer_rope_theta`, GLM-4's
# partial interleaved rotation.
RE_ROTATED = ("gemma4_text", "granite", "phi3", "qwen3_moe")


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


# model_type -> (config fields besides conftest's, what the refusal at load says)
REFUSED_AT_LOAD: dict[str, tuple[dict[str, Any], str]] = {
    "hy_v4": ({}, r"HYV4Config is not served: its sparse-attention indexer \(index_topk=2048\) caches keys of its own"),
    "deepseek_v32": (_LATENT, r"DeepseekV32Config is not served: its sparse-attention indexer \(index_topk=2048\)"),
    "deepseek_v4": ({}, r"layer type 'heavily_compressed_attention' of DeepseekV4Config is not served"),
    # layers that differ in a field other than what they cache (a Gemma 4 whose layers differ in head_dim is served)
    "gemma4_text": (
        _KV | dict(num_attention_heads=4, per_layer_config={1: {"num_attention_heads": 2}}),
        r"Gemma4TextConfig is not served: its layers differ in num_attention_heads \(4 on layer 0, 2 on layer 1\)",
    ),
    "qwen3_next": (_KV, r"layer type 'linear_attention' of Qwen3NextConfig is not served"),
    "jamba": ({}, r"layer type 'linear_attention' of JambaConfig is not served"),
    "falcon_h1": ({}, r"layer type 'hybrid' of FalconH1Config is not served"),
    "mamba": ({}, r"MambaConfig is not served: it has no attention heads"),
}


@pytest.mark.parametrize("model_type", sorted(REFUSED_AT_LOAD))
def test_a_model_whose_state_decodekit_caches_cannot_hold_is_refused_at_load(model_type: str) -> None:
    """`HFModel` reads the spec first (`model_spec`): the config alone is refused, naming the architecture and what
    is served."""
    fields, message = REFUSED_AT_LOAD[model_type]
    config = AutoConfig.for_model(model_type, **(SHARED | dict(num_hidden_layers=LAYERS, hidden_size=32) | fields))
    with pytest.raises(dk.ParameterError, match=message + r".*allowed: "):
        model_spec(config)


LATENT_REFUSAL = (
    r"multi-head latent attention \(kv_lora_rank=8\) caches latents, not the keys and values it attends over.*"
    r"allowed: a cache that keeps every token \(dense, gqa, int8\)"
)
LATENT = sorted(name for name, (_, _, kind) in ARCHS.items() if kind == "latent")


@pytest.mark.parametrize("cache", ["dense", "gqa"])
def test_a_latent_attention_spec_holds_the_latents(cache: str) -> None:
    """What DeepSeek's layers cache (`cache.update(kv_nope, k_rot)`): one latent per token, keys of kv_lora_rank dims
    and values of qk_rope_head_dim (`value_dim`), one head (not one per attention head: each expands its own keys
    from it); `dense`, as `gqa`, holds 1 · (8 + 4) floats per token and layer (it held a copy per head: 4 times)."""
    shape = dict(num_hidden_layers=LAYERS, hidden_size=32, num_attention_heads=4)
    config = AutoConfig.for_model("deepseek_v3", **(SHARED | shape | _DEEPSEEK))
    spec = model_spec(config)
    assert (spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.value_dim) == (1, 1, 8, 4)
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(spec, batch_size=3, capacity=10))
    assert kv.nbytes == LAYERS * 3 * 10 * (8 + 4) * 4  # type: ignore[attr-defined]


class Int8Rounded(DynamicCache):
    """transformers' own cache, keeping each key and value (latent) as int8 gives it back: what `generate()` sees
    through it is what decodekit's `int8` cache hands the model (a token's scale is final when it is written)."""

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        return super().update(int8_round_trip(key_states), int8_round_trip(value_states), layer_idx, *args, **kwargs)


@pytest.mark.parametrize("model_type", LATENT)
def test_latent_attention_through_int8_equals_generate_over_int8_latents(build_arch: Any, model_type: str) -> None:
    """`int8` rounds the latents it keeps: its greedy tokens are `generate()`'s through a cache that rounds them
    alike, one prompt and a ragged batch; they are not all plain `generate()`'s (the rounding shows)."""
    hf = build_arch(model_type, **(SHARED | ARCHS[model_type][0]))
    differs = False
    for prompts in BATCHES.values():
        ids, mask = left_padded(prompts)
        config = greedy_generation_config(max_new_tokens=NEW)
        want = hf.generate(ids, attention_mask=mask, generation_config=config, cache=Int8Rounded())
        plain = hf.generate(ids, attention_mask=mask, generation_config=config)
        out = dk.generate(HFModel(hf), prompts, cache="int8", chain="greedy", max_new_tokens=NEW)
        assert out.tokens == want[:, ids.shape[1] :].tolist(), (model_type, len(prompts))
        differs |= out.tokens != plain[:, ids.shape[1] :].tolist()
    assert differs, f"{model_type}: int8's tokens equal float's everywhere; the reference tells nothing apart"


@pytest.mark.parametrize("model_type", LATENT)
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_latent_attention_sampled_chain_sees_generates_distribution(
    build_arch: Any, model_type: str, batch: str
) -> None:
    """As test_architectures.py checks the older architectures: every step's kept tokens and log-probabilities."""
    hf = build_arch(model_type, **(SHARED | ARCHS[model_type][0]))
    assert_sampled_chain_sees_generate(hf, HFModel(hf), BATCHES[batch], model_type)


def test_values_narrower_than_keys_are_served(build_arch: Any, hf_greedy: Any) -> None:
    """MiMo-V2-Flash's values have v_head_dim=4 dims, its keys head_dim=8 (`value_dim`): refused at load until
    2026-12-04; with layers of one shape (no sliding layers, whose kv-heads differ) `dense`, `gqa` and, through its
    eager attention (`EAGER_SERVED`; refused until 2026-12-06), a scored cache give `generate()`'s tokens."""
    fields = _KV | dict(v_head_dim=4, layer_types=["full_attention"] * LAYERS, n_routed_experts=4) | _EXPERTS
    hf = build_arch("mimo_v2_flash", **(SHARED | fields))
    assert HFModel(hf).spec.value_dim == 4
    greedy = hf_greedy(hf, BATCHES, NEW)
    for cache in ("dense", "gqa", "h2o(budget=40)"):
        for batch, prompts in BATCHES.items():
            out = dk.generate(HFModel(hf), prompts, cache=cache, chain="greedy", max_new_tokens=NEW)
            assert out.tokens == greedy[batch], (cache, batch)


@pytest.mark.parametrize("model_type", LATENT)
def test_latent_attention_speculation_crops_the_latents(build_arch: Any, hf_greedy: Any, model_type: str) -> None:
    """Speculative decoding takes back rejected drafts from the latent caches of the model and of its draft (a noisy
    copy): `generate()`'s greedy tokens, one prompt and a ragged batch (rows cropped apart: `crop_rows`)."""
    assert_speculation_gives_generate(build_arch(model_type, **(SHARED | ARCHS[model_type][0])), hf_greedy)


def assert_speculation_gives_generate(hf: Any, hf_greedy: Any, noise: float = 0.3) -> None:
    """Speculative decoding of `hf` with a noisy copy as its draft (`noise` · each weight's spread added), `gqa`
    caches: `generate()`'s greedy tokens, one prompt and a ragged batch, some drafts taken back and some kept."""
    noisy = copy.deepcopy(hf)
    torch.manual_seed(0)
    with torch.no_grad():
        for weight in noisy.parameters():
            weight.add_(noise * torch.randn_like(weight) * weight.std())
    greedy = hf_greedy(hf, BATCHES, NEW)
    for batch, prompts in BATCHES.items():
        out = dk.decode(
            HFModel(hf),
            prompts,
            strategy="speculative",
            draft=HFModel(noisy),
            k=3,
            chain="greedy",
            cache="gqa",
            max_new_tokens=NEW,
        )
        assert out.tokens == greedy[batch], batch
        assert isinstance(out, SpeculativeGeneration)
        assert 0 < sum(out.accepted) < sum(out.drafted), (batch, out.accepted, out.drafted)  # drafts taken back


# Layers that cache other shapes (`ModelSpec.layer_shapes`): name -> (model_type, its config fields, each cached
# layer's (kv-heads, head_dim, value width) worked from them, whether its masks let an evicting cache in).
# Gemma 4 E2B/E4B as their checkpoints are: wider full-attention layers and a last 2 of 5 layers that attend over an
# earlier layer's keys (`num_kv_shared_layers`): layer 3 (sliding) over layer 1's, the last sliding one before the
# shared layers (not layer 0), layer 4 (full) over layer 2's; only layers 0-2 are cached.
_SLIDING, _FULL = "sliding_attention", "full_attention"
_GEMMA4_E = ARCHS["gemma4_text"][0] | dict(global_head_dim=16, num_hidden_layers=5, num_kv_shared_layers=2)
_GEMMA4_E |= dict(layer_types=[_SLIDING, _SLIDING, _FULL, _SLIDING, _FULL])
LAYERS_DIFFER: dict[str, tuple[str, dict[str, Any], tuple[tuple[int, int, int], ...], bool]] = {
    # full-attention layer 1 keys of global_head_dim=16 (values as wide: Gemma 4 projects both to head_dim)
    "gemma4_wide": ("gemma4_text", ARCHS["gemma4_text"][0] | dict(global_head_dim=16), ((2, 8, 8), (2, 16, 16)), True),
    # and one kv-head there (num_global_key_value_heads under attention_k_eq_v: its values are its keys)
    "gemma4_k_eq_v": (
        "gemma4_text",
        ARCHS["gemma4_text"][0] | dict(global_head_dim=16, num_global_key_value_heads=1, attention_k_eq_v=True),
        ((2, 8, 8), (1, 16, 16)),
        True,
    ),
    "gemma4_e_shared_wide": ("gemma4_text", _GEMMA4_E, ((2, 8, 8), (2, 8, 8), (2, 16, 16)), False),
    "gemma4_e_shared_k_eq_v": (
        "gemma4_text",
        _GEMMA4_E | dict(num_global_key_value_heads=1, attention_k_eq_v=True),
        ((2, 8, 8), (2, 8, 8), (1, 16, 16)),
        False,
    ),
    # sliding layer 0 caches twice num_key_value_heads=2 (its attention's code), values of v_head_dim=4 everywhere;
    # eager attention with a sink logit per head on its sliding layers (`EAGER_SERVED`)
    "mimo_v2_flash": (
        "mimo_v2_flash",
        _KV | _SLIDE_FIRST | dict(v_head_dim=4, n_routed_experts=4) | _EXPERTS,
        ((4, 8, 4), (2, 8, 4)),
        True,
    ),
}


@pytest.fixture(scope="module", params=sorted(LAYERS_DIFFER))
def differ(request: pytest.FixtureRequest, build_arch: Any) -> tuple[str, Any]:
    model_type, fields, _, _ = LAYERS_DIFFER[request.param]
    return request.param, build_arch(model_type, **(SHARED | fields))


def test_the_spec_holds_each_layers_shape(differ: tuple[str, Any]) -> None:
    """`model_spec` reads each layer's shape from the config (refused at load, or at the first forward, until
    2026-12-05); the scalar fields are layer 0's; a `gqa` cache allocates each layer's: bytes worked by hand."""
    name, hf = differ
    spec = HFModel(hf).spec
    shapes = LAYERS_DIFFER[name][2]
    assert spec.layer_shapes == shapes
    assert (spec.n_kv_heads, spec.head_dim, spec.value_dim) == (shapes[0][0], 8, None if shapes[0][2] == 8 else 4)
    kv = dk.create_cache("gqa", dk.CacheSpec.for_model(spec, batch_size=3, capacity=10))
    assert kv.nbytes == 3 * 10 * sum(h * (d + w) for h, d, w in shapes) * 4  # type: ignore[attr-defined]


def differ_caches(name: str) -> list[str]:
    """The caches each model is checked with: those that keep every token, and the model's own window where its
    masks allow one (Gemma 4: window 6 on its sliding layer 0, the context on layer 1)."""
    own = [f"window(size=[{WINDOW}, {CONTEXT}], sinks=0)"] if LAYERS_DIFFER[name][3] else []
    return ["dense", "gqa", "int8", *own]


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_layers_of_other_shapes_give_generates_tokens(differ: tuple[str, Any], batch: str) -> None:
    """Greedy tokens equal `generate()`'s, one prompt and a ragged batch, with every cache of `differ_caches`: `int8`
    against `generate()` through a cache that rounds keys and values alike (and not all plain `generate()`'s)."""
    name, hf = differ
    ids, mask = left_padded(BATCHES[batch])
    config = greedy_generation_config(max_new_tokens=NEW)
    plain = hf.generate(ids, attention_mask=mask, generation_config=config)[:, ids.shape[1] :].tolist()
    rounded = hf.generate(ids, attention_mask=mask, generation_config=config, cache=Int8Rounded())
    for cache in differ_caches(name):
        want = rounded[:, ids.shape[1] :].tolist() if cache == "int8" else plain
        out = dk.generate(HFModel(hf), BATCHES[batch], cache=cache, chain="greedy", max_new_tokens=NEW)
        assert out.tokens == want, (name, cache)
    assert len({tuple(t) for t in plain}) == len(BATCHES[batch])  # the rows differ: padding is per row


def test_int8_rounds_each_layer_as_the_reference_does(differ: tuple[str, Any]) -> None:
    """The int8 reference above has the power to fail: on a prompt the logits through `int8` are those of the model
    through a cache that rounds alike, and differ from the float ones (the greedy tokens alone may not show it)."""
    name, hf = differ
    ids = torch.tensor([PROMPTS[0]])
    model = HFModel(hf)
    kv = dk.create_cache("int8", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=ids.shape[1]))
    got = model(ids, torch.arange(ids.shape[1])[None], kv)
    with torch.no_grad():
        plain = hf(input_ids=ids).logits
        rounded = hf(input_ids=ids, cache=Int8Rounded(), use_cache=True).logits
    torch.testing.assert_close(got, rounded, rtol=0, atol=1e-5)
    assert (got - plain).abs().max() > 1e-4, f"{name}: int8's logits equal float's; the reference tells nothing apart"


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_layers_of_other_shapes_sampled_chain_sees_generates_distribution(differ: tuple[str, Any], batch: str) -> None:
    """As test_architectures.py checks the older architectures: every step's kept tokens and log-probabilities."""
    name, hf = differ
    assert_sampled_chain_sees_generate(hf, HFModel(hf), BATCHES[batch], name)


SCORED = ("h2o", "tova", "knorm", "streaming", "snapkv")
# The models whose layers differ that take an evicting cache, each with a window as long as the context: the texts fit
# it, so their sliding layers mask nothing and a scored cache is served.
EVICTING = sorted(name for name, (_, _, _, evicts) in LAYERS_DIFFER.items() if evicts)


@pytest.fixture(scope="module", params=EVICTING)
def wide_window(request: pytest.FixtureRequest, build_arch: Any) -> Any:
    model_type, fields, _, _ = LAYERS_DIFFER[request.param]
    return build_arch(model_type, **(SHARED | fields | dict(sliding_window=CONTEXT)))


def _logits(model: HFModel, cache: str, prompts: list[list[int]], after: Tensor, one_block: bool = False) -> Tensor:
    """Logits `[B, 1 + T, V]`: at the prompts' last token (left-padded), then at each token of `after` `[B, T]`, fed
    one at a time or as one block."""
    ids, positions = dk.prompts.left_pad(prompts, max(map(len, prompts)), "cpu")
    P, T = ids.shape[1], after.shape[1]
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=len(prompts), capacity=P + T))
    out = [model(ids, positions, kv)[:, -1:]]
    steps = positions[:, -1:] + 1 + torch.arange(T)
    blocks = [slice(0, T)] if one_block else [slice(t, t + 1) for t in range(T)]
    return torch.cat(out + [model(after[:, b], steps[:, b], kv) for b in blocks], 1)


@pytest.mark.parametrize("cache", SCORED)
def test_layers_of_other_shapes_a_scored_cache_within_its_budget_is_dense(wide_window: Any, cache: str) -> None:
    """Each scored cache, with and without `prefill_only`, over each storage it takes, with a budget past the text:
    the logits of `dense` (`int8`'s over int8) on a ragged batch, and its greedy tokens (refused at creation, naming
    layer_shapes, until 2026-12-06)."""
    model = HFModel(wide_window)
    after = torch.randint(1, V - 1, (len(PROMPTS), 4), generator=torch.Generator().manual_seed(0))
    kept_all = {store: _logits(model, store, PROMPTS, after) for store in ("dense", "int8")}
    tokens = dk.generate(model, PROMPTS, cache="dense", chain="greedy", max_new_tokens=NEW).tokens
    for prefill_only in (False, True):
        for store in ("gqa", "int8", "dense"):
            made = f"{cache}(budget=40, store={store!r}, prefill_only={prefill_only})"
            got = _logits(model, made, PROMPTS, after)
            torch.testing.assert_close(got, kept_all["int8" if store == "int8" else "dense"], rtol=1e-4, atol=1e-4)
        made = f"{cache}(budget=40, prefill_only={prefill_only})"
        assert dk.generate(model, PROMPTS, cache=made, chain="greedy", max_new_tokens=NEW).tokens == tokens, made


@pytest.mark.parametrize("cache", SCORED)
def test_layers_of_other_shapes_prefill_only_compresses_the_prompt_alone(wide_window: Any, cache: str) -> None:
    """`prefill_only` once the prompt is compressed: each token after it sees the prompt's kept entries and every token
    since, as the same cache without it given those tokens as one block (test_prefill_only.py's reference); the
    evicting cache fed them one at a time is another cache."""
    model, params = HFModel(wide_window), "budget=6, sinks=1, recent=2"
    after = torch.randint(1, V - 1, (len(PROMPTS), 10), generator=torch.Generator().manual_seed(1))
    steps = _logits(model, f"{cache}({params}, prefill_only=True)", PROMPTS, after)
    block = _logits(model, f"{cache}({params})", PROMPTS, after, one_block=True)  # 10 > slack: one long block
    torch.testing.assert_close(steps, block, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(steps, _logits(model, f"{cache}({params})", PROMPTS, after), atol=1e-3)


def _rule_keeps(policy: str, k: Tensor, q: Tensor, prompt: int, budget: int, sinks: int, recent: int) -> list[set[int]]:
    """Per kv-head, the slots one row of one layer keeps by docs/caches.md's rules, in float64, after a prompt of
    `prompt` tokens (no more than the budget) and then one token per forward. k `[H_kv, S, D]`: the keys fed; q `[H,
    S, D]`: the queries observed, each kv-head's group of query heads over its keys (snapkv decodes as h2o)."""
    H_kv, S, D = k.shape
    # Norms in float32, as the cache's: Gemma 4 normalises its keys, so they tie but for rounding.
    norms = torch.linalg.vector_norm(k.float(), dim=-1).double()
    G, k, q = q.shape[0] // H_kv, k.double(), q.double()
    score = {
        "knorm": -norms,
        "streaming": torch.arange(S, dtype=torch.float64).expand(H_kv, S).clone(),
    }.get(policy, torch.zeros(H_kv, S, dtype=torch.float64))
    held = [list(range(prompt)) for _ in range(H_kv)]

    def keep(h: int, length: int) -> None:  # the `budget` best: sinks and recent first, then score, the newer on a tie
        ranked = sorted(held[h], key=lambda t: (math.inf if t < sinks or t >= length - recent else score[h, t], t))
        held[h] = sorted(ranked[-budget:])

    for i in range(S):
        if i >= prompt:  # a forward of one token: the held set compressed (keep() is a no-op within budget), written
            for h in range(H_kv):
                keep(h, i)
                held[h].append(i)
        seen = [[t for t in held[h] if t <= i] for h in range(H_kv)]
        w = [torch.softmax(q[h * G : (h + 1) * G, i] @ k[h, seen[h]].T / math.sqrt(D), -1) for h in range(H_kv)]
        for h in range(H_kv):
            if policy in ("h2o", "snapkv"):  # every query's attention, mean over the kv-head's query heads
                score[h, seen[h]] += w[h].mean(0)
            elif policy == "tova" and (i >= prompt or i == prompt - 1):  # the latest query's, mean over every head
                score[h] = 0.0
                score[h, seen[h]] = torch.cat(w).mean(0)
    for h in range(H_kv):
        keep(h, S)
    return [set(x) for x in held]


@pytest.mark.parametrize("cache", SCORED)
def test_layers_of_other_shapes_each_layer_keeps_what_its_rule_says(
    wide_window: Any, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its budget, each layer, row and kv-head keeps the entries a float64 reference of the rule picks from the
    keys that layer was fed and the queries it observed, in the layer's own kv-heads and head_dim."""
    model = HFModel(wide_window)
    budget, sinks, recent, prompt, S = 8, 2, 2, 6, 20
    ids = torch.randint(1, V - 1, (2, S), generator=torch.Generator().manual_seed(2))
    spec = dk.CacheSpec.for_model(model.spec, batch_size=2, capacity=S)
    kv: Any = dk.create_cache(f"{cache}(budget={budget}, sinks={sinks}, recent={recent})", spec)
    keys: list[list[Tensor]] = [[] for _ in range(spec.n_layers)]
    queries: list[list[Tensor]] = [[] for _ in range(spec.n_layers)]
    update, observe = kv.update, getattr(kv, "observe", None)

    def recorded(layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys[layer].append(k)
        return update(layer, k, v)  # type: ignore[no-any-return]

    def observed(layer: int, q: Tensor) -> None:
        queries[layer].append(q)
        observe(layer, q)  # type: ignore[misc]  # set only where the cache observes

    monkeypatch.setattr(kv, "update", recorded)
    if observe is not None:
        monkeypatch.setattr(kv, "observe", observed)
    model(ids[:, :prompt], torch.arange(prompt).expand(2, -1), kv)
    for t in range(prompt, S):
        model(ids[:, t : t + 1], torch.full((2, 1), t), kv)
    for layer, shape in enumerate(spec.layer_shapes or ()):
        k = torch.cat(keys[layer], 2)
        q = torch.cat(queries[layer], 2) if queries[layer] else torch.zeros(2, spec.n_heads, S, shape[1])
        assert k.shape[1:] == (shape[0], S, shape[1])  # the layer's own kv-heads and head_dim
        for row in range(2):
            want = _rule_keeps(cache, k[row], q[row], prompt, budget, sinks, recent)
            got = [set(x[x >= 0].tolist()) for x in kv.kept(layer)[row]]
            assert got == want, (cache, layer, row)
            assert all(len(x) == budget for x in got)


def test_each_cached_layer_has_the_shape_transformers_caches(differ: tuple[str, Any]) -> None:
    """A second reading of `layer_shapes`: the layers transformers' own cache fills on a forward (a shared layer
    fills none) are as many as decodekit's cache holds, each of the (kv-heads, head_dim, value width) read for it."""
    _, hf = differ
    theirs = DynamicCache(config=hf.config)
    with torch.no_grad():
        hf(input_ids=torch.tensor([PROMPTS[0]]), cache=theirs, use_cache=True)
    # transformers' layer union includes linear-attention layers without keys; this model has none
    filled: list[tuple[Any, Any]] = [(layer.keys, layer.values) for layer in theirs.layers if layer.keys is not None]  # type: ignore[union-attr]
    assert all(k.shape[1] == v.shape[1] for k, v in filled)  # values of as many kv-heads as keys
    assert tuple((k.shape[1], k.shape[3], v.shape[3]) for k, v in filled) == HFModel(hf).spec.layer_shapes


SHARES_KEYS = sorted(name for name, (_, fields, _, _) in LAYERS_DIFFER.items() if "num_kv_shared_layers" in fields)


@pytest.mark.parametrize("name", SHARES_KEYS)
def test_shared_wider_layers_refuse_an_evicting_cache(build_arch: Any, name: str) -> None:
    """Gemma 4 E2B/E4B: a `window` (the model's own too) and a scored cache are refused naming num_kv_shared_layers,
    as where layers are of one shape (the scored one was refused at creation, naming layer_shapes, until 2026-12-06).
    Layers 3 and 4 read the keys that layers 1 and 2 store (transformers' `kv_sharing_modes`), as the comment on
    `_GEMMA4_E` says."""
    model_type, fields, _, _ = LAYERS_DIFFER[name]
    hf = build_arch(model_type, **(SHARED | fields))
    assert hf.config.kv_sharing_modes == [None, "store", "store", "reuse", "reuse"]
    for cache in (
        f"window(size=[{WINDOW}, {WINDOW}, {CONTEXT}], sinks=0)",
        "window(size=30, sinks=2)",
        "h2o(budget=40)",
    ):
        with pytest.raises(
            dk.ParameterError,
            match=r"model.s last 2 layers \(num_kv_shared_layers=2\) attend over all of an "
            r"earlier layer's keys.*allowed: a cache that keeps every token \(dense, gqa, int8\)",
        ):
            dk.generate(HFModel(hf), PROMPTS, cache=cache, chain="greedy", max_new_tokens=NEW)


def test_gemma4_e2bs_config_caches_its_first_15_layers_each_in_its_shape() -> None:
    """Gemma 4 E2B's config (35 layers, four sliding then one full; the last 20 share keys; one kv-head of 256 dims,
    512 on the full layers): a cache of layers 0-14, the full ones (4, 9, 14) wider, worked by hand from the config.
    The shared layers read layer 13's keys (the last sliding layer that keeps any) or layer 14's."""
    types = ([_SLIDING] * 4 + [_FULL]) * 7
    fields = dict(num_hidden_layers=35, num_kv_shared_layers=20, layer_types=types, hidden_size=1536)
    fields |= dict(num_attention_heads=8, num_key_value_heads=1, head_dim=256, global_head_dim=512)
    config = AutoConfig.for_model("gemma4_text", **(SHARED | fields))
    spec = model_spec(config)
    assert spec.n_layers == 15
    assert spec.layer_shapes == tuple((1, 512, 512) if layer in (4, 9, 14) else (1, 256, 256) for layer in range(15))
    assert [layer for layer, mode in enumerate(config.kv_sharing_modes) if mode == "store"] == [13, 14]


def test_a_layer_that_caches_another_shape_than_its_spec_states_is_refused_at_first_use(build_arch: Any) -> None:
    """MiMo-V2-Flash's sliding layer 0 caches twice num_key_value_heads, which a spec of one shape (as `model_spec`
    read it until 2026-12-05) misstates: the first forward's keys say so, naming the layer and the shapes, before a
    cache is written."""
    hf = build_arch("mimo_v2_flash", **(SHARED | LAYERS_DIFFER["mimo_v2_flash"][1]))
    model = HFModel(hf)
    model.spec = replace(model.spec, n_kv_heads=2, layer_shapes=None)
    with pytest.raises(
        dk.ParameterError,
        match=r"layer 0 of MiMoV2FlashForCausalLM caches keys of 4 kv-heads of 8 dims and values of 4 of 4, not the 2 "
        r"of head_dim=8 \(values: 4\) its config states for that layer; allowed: ",
    ):
        dk.generate(model, BATCHES["single"], cache="dense", max_new_tokens=2)


@pytest.mark.parametrize("name", sorted(LAYERS_DIFFER))
def test_layers_of_other_shapes_speculation_takes_back_drafts(build_arch: Any, hf_greedy: Any, name: str) -> None:
    """Speculative decoding takes back rejected drafts, rows apart (`crop_rows`), from caches whose layers differ
    in shape, the model's and its draft's: `generate()`'s greedy tokens (MiMo's draft at 0.3 kept none of a prompt,
    nor the shared Gemma 4's)."""
    model_type, fields, _, _ = LAYERS_DIFFER[name]
    noise = 0.3 if name in ("gemma4_wide", "gemma4_k_eq_v") else 0.1
    assert_speculation_gives_generate(build_arch(model_type, **(SHARED | fields)), hf_greedy, noise)

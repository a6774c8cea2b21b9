"""Keys an evicting cache moves, on every fixed-frequency rotary embedding transformers has: scaled frequencies
(llama3, linear, yarn), a partial rotary embedding (Phi-4-mini's), per-layer-type embeddings (Gemma 3, Gemma 4's
proportional one, MiMo-V2-Flash's partial ones). The oracle is transformers' own model on the kept tokens at
contiguous positions: it does not run decodekit's rotary code. Until `ModelSpec.rope_frequencies`, none of these
moved the window's sinks, and each was refused past its context with an evicting cache."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_hf.model import HFModel

import decodekit as dk
from tinymodels import assert_window_moves_sinks_as_transformers

CONTEXT = 32
_GEMMA3 = dict(num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=128)
_GEMMA3_ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    "full_attention": {"rope_type": "linear", "rope_theta": 1000.0, "factor": 8.0},
}
_GEMMA4 = dict(num_key_value_heads=2, head_dim=8, global_head_dim=16, sliding_window=128)
_GEMMA4 |= dict(hidden_size_per_layer_input=8, vocab_size_per_layer_input=256)  # proportional: a quarter turns
_MIMO = dict(num_key_value_heads=2, head_dim=16, v_head_dim=8, sliding_window=128)  # a third of each head turns
_MIMO |= dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
_LLAMA3 = {"rope_type": "llama3", "rope_theta": 100.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
_YARN = {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0}
_FROM = {"original_max_position_embeddings": 8}
_LINEAR = {"rope_type": "linear", "rope_theta": 100.0, "factor": 4.0}
_TYPES = ["sliding_attention", "full_attention"]
# name -> (model_type, config fields besides conftest's, the layer types of a two-layer model, or None)
KINDS: dict[str, tuple[str, dict[str, Any], list[str] | None]] = {
    "llama3": ("llama", dict(num_key_value_heads=2, rope_parameters=_LLAMA3 | _FROM), None),
    "linear": ("llama", dict(num_key_value_heads=2, rope_parameters=_LINEAR), None),
    "yarn": ("qwen2", dict(num_key_value_heads=2, rope_parameters=_YARN | _FROM), None),
    "partial": ("phi3", dict(num_key_value_heads=2, partial_rotary_factor=0.75), None),  # Phi-4-mini's
    "gemma3": ("gemma3_text", _GEMMA3 | dict(rope_parameters=_GEMMA3_ROPE), _TYPES),
    "gemma4": ("gemma4_text", _GEMMA4, _TYPES),
    "mimo": ("mimo_v2_flash", _MIMO, _TYPES),
}


def build(build_arch: Any, name: str, layer_types: list[str] | None = None, **overrides: Any) -> Any:
    """The tiny model of `KINDS[name]` (`layer_types`: its own, or these), at a context of 32."""
    model_type, fields, types = KINDS[name]
    layers = layer_types or types
    if layers is not None:
        fields |= dict(layer_types=layers, num_hidden_layers=len(layers))
    return build_arch(model_type, **(fields | dict(max_position_embeddings=CONTEXT) | overrides))


# Each layer type of each kind, alone in a one-layer model.
ONE_LAYER: list[tuple[str, str | None]] = [(name, None) for name, kind in KINDS.items() if kind[2] is None]
ONE_LAYER += [(name, kind) for name, (_, _, types) in KINDS.items() for kind in types or ()]


@pytest.mark.parametrize(("name", "layer_type"), ONE_LAYER)
@torch.no_grad()
def test_one_layer_window_moves_its_sinks_as_the_model_rotates(
    build_arch: Any, name: str, layer_type: str | None
) -> None:
    """StreamingLLM's claim, exactly: with one layer the window through the cache equals transformers' forward over
    the sinks and the last `size` tokens at positions 0 .. S-1, far past the context. Before, these models had no
    rope_base: their sinks were not moved, and the logits differed from the first eviction on."""
    hf = build(build_arch, name, None if layer_type is None else [layer_type], num_hidden_layers=1)
    model = HFModel(hf)
    assert model.spec.rope_frequencies is not None and model.spec.rope_base is None
    assert_window_moves_sinks_as_transformers(hf, model)


@pytest.mark.parametrize("name", ["partial", "gemma3", "mimo"])
@torch.no_grad()
def test_a_window_fed_in_blocks_moves_each_querys_sinks_as_single_steps_do(build_arch: Any, name: str) -> None:
    """A block gives each query its own moved copy of the sinks (by each layer's frequencies, over a partial head's
    first dims): two layers fed 4 tokens at a time give the logits they give one token at a time (which the test
    above checks against transformers)."""
    model = HFModel(build(build_arch, name))
    ids = torch.randint(0, 96, (1, 60), generator=torch.Generator().manual_seed(2))
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1)
    one, blocks = (dk.create_cache("window(size=8, sinks=2, slack=4)", spec) for _ in range(2))
    singles = torch.cat([model(ids[:, t : t + 1], torch.tensor([[t]]), one) for t in range(60)], 1)
    chunks = torch.cat([model(ids[:, a : a + 4], torch.arange(a, a + 4)[None], blocks) for a in range(0, 60, 4)], 1)
    torch.testing.assert_close(chunks, singles, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", [name for name, kind in KINDS.items() if kind[2] is not None])
def test_each_layer_takes_its_own_types_frequencies(build_arch: Any, name: str) -> None:
    """The spec's frequencies of each layer are the ones transformers' rotary embedding holds for its type (Gemma 4's
    full-attention layers: their own head_dim's); the one-layer test above checks each type's, not which layer
    gets which."""
    hf = build(build_arch, name)
    spec = HFModel(hf).spec
    rotary = hf.get_decoder().rotary_emb
    assert spec.rope_frequencies is not None
    for layer, kind in enumerate(hf.config.layer_types):
        want = getattr(rotary, f"{kind}_inv_freq")
        assert torch.equal(torch.tensor(spec.rope_frequencies[layer], dtype=want.dtype), want), f"layer {layer}"


@pytest.mark.parametrize("name", sorted(KINDS))
@pytest.mark.parametrize("cache", ["window(size=8, sinks=2)", "h2o(budget=12)"])
def test_a_text_past_the_context_decodes_with_an_evicting_cache(build_arch: Any, name: str, cache: str) -> None:
    """Was ContextLengthError: "... and its rotary scaling 'llama3' (its partial rotary embedding, its rotary
    embedding per layer type) is not supported for re-rotating kept keys"."""
    model = HFModel(build(build_arch, name))
    out = dk.generate(model, [[1, 2, 3], [4, 5]], max_new_tokens=2 * CONTEXT, cache=cache, seed=0)
    assert [len(tokens) for tokens in out.tokens] == [2 * CONTEXT, 2 * CONTEXT]


def test_frequencies_that_change_with_the_length_are_refused_naming_the_scaling(build_arch: Any) -> None:
    """Dynamic NTK scaling recomputes its frequencies as the text grows, so a stored key's rotation cannot be
    continued: past the context an evicting cache is refused, naming it."""
    scaling = {"rope_type": "dynamic", "rope_theta": 100.0, "factor": 4.0}
    model = HFModel(build_arch("llama", num_hidden_layers=1, max_position_embeddings=CONTEXT, rope_parameters=scaling))
    assert not model.spec.movable_keys
    with pytest.raises(dk.ContextLengthError) as info:
        dk.generate(model, [[1, 2, 3]], max_new_tokens=40, cache="window(size=8, sinks=2)")
    assert str(info.value) == (
        "prompt of 3 tokens + max_new_tokens=40 = 43 tokens exceeds the model's context of 32 positions, and its "
        "rotary scaling 'dynamic' recomputes its frequencies with the text's length: not supported for re-rotating "
        "kept keys: an evicting cache cannot take it further; use cache='none' (it crops the context) or fewer "
        "tokens: lower max_new_tokens to 29 or fewer (the context less the prompt's 3 tokens)"
    )

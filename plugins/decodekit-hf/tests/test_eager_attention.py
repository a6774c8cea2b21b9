"""Models that transformers runs on eager attention (Gemma 2 and VaultGemma: soft-capped attention logits; gpt-oss,
MiMo-V2-Flash: a sink logit per head) through decodekit's caches: `eager_terms_attention` against transformers' own
eager functions, and caches that evict or observe against `generate()` where the text fits the model's sliding window
(test_architectures.py has the window past it)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_hf import HFModel
from decodekit_hf.cache_bridge import eager_terms_attention
from transformers.models.flint import modeling_flint
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.gpt_oss import modeling_gpt_oss
from transformers.models.granite_swa import modeling_granite_swa
from transformers.models.granitemoe_swa import modeling_granitemoe_swa
from transformers.models.mimo_v2_flash import modeling_mimo_v2_flash

import decodekit as dk

V, CONTEXT, NEW = 256, 64, 12
PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60, 200, 31], [7, 8], [83, 1, 33, 33, 12]]
SHARED: dict[str, Any] = dict(
    vocab_size=V, max_position_embeddings=CONTEXT, bos_token_id=V - 1, eos_token_id=V - 1, pad_token_id=V - 1
)
_GQA = dict(num_key_value_heads=2, head_dim=8)
# A window as long as the context: every text here fits it, so a scored cache is served. A soft cap of 1 bites on
# these logits (Gemma 2's 50 would leave them as they are).
MODELS: dict[str, dict[str, Any]] = {
    "gemma2": _GQA | dict(sliding_window=CONTEXT, query_pre_attn_scalar=8, attn_logit_softcapping=1.0),
    "vaultgemma": _GQA | dict(sliding_window=CONTEXT, query_pre_attn_scalar=8, attn_logit_softcapping=1.0),
    "gpt_oss": _GQA
    | dict(sliding_window=CONTEXT, num_local_experts=4, num_experts_per_tok=2)
    | dict(rope_parameters=dict(rope_type="yarn", factor=32.0, rope_theta=1e5, original_max_position_embeddings=2)),
    # sinks as gpt-oss's (Flint), or as an output scale sigmoid(logsumexp - sink) (Granite SWA, Granite-MoE SWA)
    "flint": _GQA
    | dict(sliding_window=CONTEXT, layer_types=["sliding_attention", "full_attention"], num_experts=4)
    | dict(num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16),
    "granite_swa": _GQA | dict(sliding_window=CONTEXT, layer_types=["sliding_attention", "full_attention"]),
    "granitemoe_swa": _GQA
    | dict(sliding_window=CONTEXT, layer_types=["sliding_attention", "full_attention"], num_local_experts=4),
    # sinks as gpt-oss's on its sliding layer, which caches twice the kv-heads of its full one (`layer_shapes`)
    "mimo_v2_flash": _GQA
    | dict(sliding_window=CONTEXT, layer_types=["sliding_attention", "full_attention"], v_head_dim=4)
    | dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16),
}
# The eager function of each model of `EAGER_SERVED` with its term: a soft cap, or a sink logit per head.
EAGER: dict[str, tuple[Any, str]] = {
    "gemma2": (modeling_gemma2.eager_attention_forward, "softcap"),
    "gpt_oss": (modeling_gpt_oss.eager_attention_forward, "sinks"),
    "flint": (modeling_flint.eager_attention_forward, "sinks"),
    "granite_swa": (modeling_granite_swa.eager_attention_forward, "sinks"),
    "granitemoe_swa": (modeling_granitemoe_swa.eager_attention_forward, "sinks"),
    "mimo_v2_flash": (modeling_mimo_v2_flash.eager_attention_forward, "sinks"),
}


class _Heads(torch.nn.Module):
    """What transformers' eager functions read of the attention module."""

    training = False

    def __init__(self, heads: int, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups, self.head_dim = groups, 8
        self.sinks = torch.nn.Parameter(torch.randn(heads))


@pytest.mark.parametrize("model_type", sorted(EAGER))
@pytest.mark.parametrize("stored", ["kv_heads", "query_heads"])  # a gqa cache's keys, a dense cache's (repeated)
def test_eager_terms_attention_equals_transformers_eager(model_type: str, stored: str) -> None:
    """Each served model's eager function under the additive mask transformers builds from the same bool mask,
    for random queries, keys and a mask that hides a random half of the keys (never a whole row)."""
    function, kind = EAGER[model_type]
    torch.manual_seed(0)
    B, H, H_kv, T, S = 2, 4, 2, 3, 7
    q, k, v = torch.randn(B, H, T, 8) * 3, torch.randn(B, H_kv, S, 8) * 3, torch.randn(B, H_kv, S, 8)
    mask = torch.rand(B, 1, T, S) < 0.5
    mask[..., 0] = True
    additive = torch.zeros(B, 1, T, S).masked_fill(~mask, torch.finfo(torch.float32).min)
    module = _Heads(H, H // H_kv)
    want, _ = function(module, q, k, v, additive, scaling=0.3, softcap=2.0 if kind == "softcap" else None)
    if stored == "query_heads":
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    softcap, sinks = (2.0, None) if kind == "softcap" else (None, module.sinks)
    got = eager_terms_attention(q, k, v, mask, 0.3, softcap, sinks)
    torch.testing.assert_close(got.transpose(1, 2), want)
    plain = eager_terms_attention(q, k, v, mask, 0.3, None, None)
    assert not torch.allclose(plain, got, atol=1e-2)  # the term changes the result: the comparison has power


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request: pytest.FixtureRequest, build_arch: Any, gen_config: Any, left_pad: Any) -> tuple[Any, list[Any]]:
    """(model, transformers' greedy tokens for `PROMPTS` left-padded)."""
    hf = build_arch(request.param, **(SHARED | MODELS[request.param]))
    ids, mask = left_pad(PROMPTS)
    out = hf.generate(ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=NEW))
    return hf, out[:, ids.shape[1] :].tolist()


@pytest.mark.parametrize("cache", ["window(size=30, sinks=2)", *(f"{c}(budget=40)" for c in ("h2o", "snapkv", "tova"))])
def test_caches_that_evict_or_observe_give_generates_tokens(model: tuple[Any, list[Any]], cache: str) -> None:
    """Before they evict, through decodekit's attention (refused before: "attn_implementation='eager'")."""
    hf, greedy = model
    out = dk.generate(HFModel(hf), PROMPTS, cache=cache, chain="greedy", max_new_tokens=NEW)
    assert out.tokens == greedy


def test_without_its_soft_cap_gemma2_generates_other_tokens(build_arch: Any, gen_config: Any, left_pad: Any) -> None:
    """The same weights uncapped give other tokens: the comparison above would see the cap left out."""
    tokens = []
    for cap in (1.0, None):
        hf = build_arch("gemma2", **(SHARED | MODELS["gemma2"] | dict(attn_logit_softcapping=cap)))
        ids, mask = left_pad(PROMPTS)
        tokens.append(hf.generate(ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=NEW)).tolist())
    assert tokens[0] != tokens[1]


# Eager attention of their own code, not transformers' attention interface (MPT and Bloom: ALiBi; GPT-Neo: unscaled).
OWN_EAGER: dict[str, dict[str, Any]] = {
    "xglm": dict(d_model=32, ffn_dim=64, attention_heads=4),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=8),
    "mpt": dict(d_model=32, n_heads=4, n_layers=2),
}


@pytest.mark.parametrize("model_type", sorted(OWN_EAGER))
def test_other_eager_attention_is_refused_naming_what_is_served(build_arch: Any, model_type: str) -> None:
    hf = build_arch(model_type, **OWN_EAGER[model_type])
    with pytest.raises(dk.ParameterError, match=r"attn_implementation='eager'.*allowed: .*dense.*gemma2, vaultgemma"):
        dk.generate(HFModel(hf), [[1, 2, 3]], cache="h2o(budget=40)", max_new_tokens=3)
    assert len(dk.generate(HFModel(hf), [[1, 2, 3]], cache="dense", max_new_tokens=3).tokens[0]) == 3  # dense: served


class _OwnGemma2Attention(modeling_gemma2.Gemma2Attention):
    """A user's subclass, defined in a module without an `eager_attention_forward`."""


def test_a_subclassed_attention_module_runs_its_base_classes_eager_function(
    build_arch: Any, gen_config: Any, left_pad: Any
) -> None:
    """The eager function was looked up in the attention class's own module only (an AttributeError here)."""
    hf = build_arch("gemma2", **(SHARED | MODELS["gemma2"]))
    ids, mask = left_pad(PROMPTS)
    greedy = hf.generate(ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=NEW))
    for layer in hf.model.layers:
        layer.self_attn.__class__ = _OwnGemma2Attention
    out = dk.generate(HFModel(hf), PROMPTS, cache="dense", chain="greedy", max_new_tokens=NEW)
    assert out.tokens == greedy[:, ids.shape[1] :].tolist()

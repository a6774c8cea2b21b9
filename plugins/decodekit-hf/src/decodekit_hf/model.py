"""`HFModel`: any transformers causal LM behind decodekit's model protocol, and the `hf:` loader.

The protocol is `model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`. The decode
loop left-pads ragged prompts and gives padding negative positions; a new query `i` sits in
cache slot `cache.length + i`, so row `b` has `slot - position` padding slots. transformers
wants the same facts as a 2-D `attention_mask` `[B, past + T]` (0 on padding) and
`position_ids` (here: the positions clamped at 0; what a padding token sees never reaches a
real one). When no row is padded no mask is passed, so transformers keeps its unmasked kernel.
decodekit's cache reaches the model as a transformers `Cache` (`DecodekitCache`). A cache that keeps
every token in slot order (dense, gqa, int8) runs under transformers' own masks and SDPA; one that
evicts (window, h2o, ...) or observes attention runs through the `decodekit` attention function
(`cache_bridge`): the cache's mask, SDPA, then the queries to the cache, as in the reference GPT.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from numbers import Integral
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from decodekit.cache import KVCache, cache_name, evicts, observes
from decodekit.copies import CopiesView
from decodekit.errors import ParameterError
from decodekit.param_types import words
from decodekit.spec import ModelSpec
from decodekit_hf.cache_bridge import (
    ATTENTION,
    EAGER_ATTENTION,
    EAGER_SERVED,
    CacheAttention,
    DecodekitCache,
    cache_attention,
    register_attention,
)
from decodekit_hf.checkpoint_options import generation_defaults
from decodekit_hf.params import HFParams
from decodekit_hf.placement import torch_device
from decodekit_hf.tokenizer import HFTokenizer, eos_token_ids

__all__ = ["CALIBRATION_NAME", "HFModel", "load_hf", "model_spec", "rope_base"]

CALIBRATION_NAME = "calibration.json"  # `decodekit cache calibrate --json`, next to the weights

# Layer types whose cache is plain keys and values: full attention, or a sliding window or chunks (Llama 4) that the
# mask applies over keys the decodekit cache keeps in full.
_ATTENTION_LAYERS = ("full_attention", "sliding_attention", "chunked_attention")
# Architectures whose rotary embedding is decodekit.rope's (rotate-half, angles position · inv_freq) on the cached keys
# (any key norm before it), so a cache may move their keys: Llama's `apply_rotary_pos_emb`. Each is checked by moving
# the window's sinks (test_evicting_caches).
_ROTATE_HALF = (
    *("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "phi3", "phimoe"),
    *("olmo", "olmo2", "olmoe", "starcoder2", "granite", "granitemoe", "seed_oss", "arcee"),
    *("gemma3_text", "gemma4_text", "mimo_v2_flash"),
)
# Of those, the ones whose attention rotates a partial rotary embedding's first dims and passes the rest (Phi-4-mini's
# `partial_rotary_factor`); Llama's code would fail on it.
_PARTIAL = ("phi3", "mimo_v2_flash")
# Scalings whose frequencies transformers recomputes with the sequence length (`dynamic_rope_update`: any "dynamic"
# type, "longrope"), so a stored key's rotation is not one a later step can continue.
_BY_LENGTH = ("dynamic", "longrope")

_Frequencies = tuple[tuple[float, ...], ...]


def rope_base(config: Any) -> float | None:
    """The rotary base of a config whose keys decodekit can rotate further (`decodekit.rope.rotate`) by the default
    frequencies over the whole head, else None (its frequencies are `ModelSpec.rope_frequencies`, or unknown)."""
    return _rope(config, 0)[0]


def _rope(config: Any, n_layers: int) -> tuple[float | None, _Frequencies | None, str | None]:
    """How a model's keys rotate: `rope_base`, else each of its `n_layers` layers' inverse frequencies, exactly as
    transformers computes them (`rope_frequencies`), else neither and why, for a rotary model (`rope_note`)."""
    # transformers 5: `rope_parameters` {"rope_type", "rope_theta"} (`rope_scaling` is its alias), or one such per
    # layer type (Gemma 3: {"sliding_attention": {...}, "full_attention": {...}}); 4.x: `rope_theta` beside an
    # optional `rope_scaling`.
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if not isinstance(rope, dict):
        return None, None, None
    per_type = any(isinstance(value, dict) for value in rope.values())
    theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
    model_type = getattr(config, "model_type", None)
    if model_type not in _ROTATE_HALF:  # absolute positions (GPT-2), or a rotary layout of its own
        rotary = per_type or theta is not None or getattr(config, "rotary_dim", None) is not None  # GPT-J: rotary_dim
        return (
            None,
            None,
            f"its rotary embedding ({model_type}'s own layout) is not supported for " + _KEPT if rotary else None,
        )
    if not per_type and theta is None:
        return None, None, None
    kinds = list(config.layer_types)[:n_layers] if per_type else [None] * max(n_layers, 1)
    by_kind: dict[str | None, tuple[float, ...]] = {}
    for kind in dict.fromkeys(kinds):
        freq = _frequencies(config, kind, rope[kind] if kind is not None else rope | {"rope_theta": theta})
        if isinstance(freq, str):
            return None, None, freq
        by_kind[kind] = freq
    if not per_type and rope.get("rope_type", rope.get("type", "default")) == "default" and _partial(config, rope) == 1:
        return (float(theta), None, None) if isinstance(theta, (int, float)) else (None, None, None)
    return None, tuple(by_kind[kind] for kind in kinds[:n_layers]), None


def _by_length(config: Any) -> bool:
    """Whether transformers picks the rotary frequencies by a forward's largest position (`_BY_LENGTH`): a prompt's
    prefix fed alone would then rotate by others than the whole prompt's (`ModelSpec.splittable`)."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if not isinstance(rope, dict):
        return False
    params = [value for value in rope.values() if isinstance(value, dict)] or [rope]  # one per layer type, or one
    return any(kind in str(p.get("rope_type", p.get("type", ""))) for p in params for kind in _BY_LENGTH)


def _partial(config: Any, params: dict[str, Any]) -> float:
    """The share of the head a rotary embedding turns (transformers 5 keeps it in `rope_parameters`)."""
    return float(params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0))


def _frequencies(config: Any, kind: str | None, params: dict[str, Any]) -> tuple[float, ...] | str:
    """The inverse frequencies of layers of type `kind` (None: every layer), or why decodekit cannot move their keys."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = str(params.get("rope_type", params.get("type", "default")))
    partial = _partial(config, params)
    if any(kind in scaling for kind in _BY_LENGTH):
        return (
            f"its rotary scaling {scaling!r} recomputes its frequencies with the text's length: not supported for "
            + _KEPT
        )
    if partial != 1 and scaling != "proportional" and config.model_type not in _PARTIAL:  # proportional: whole head
        return f"its partial rotary embedding (partial_rotary_factor={partial}) is not supported for " + _KEPT
    if scaling == "default":  # each model's own default: `theta^(-2i/dim)` over its rotated dims, in float32
        dim = int(_head_dim(config, kind) * partial)
        inv_freq = 1.0 / (float(params["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    elif scaling in ROPE_INIT_FUNCTIONS:
        inv_freq = ROPE_INIT_FUNCTIONS[scaling](config, "cpu", layer_type=kind)[0]
    else:
        return f"its rotary scaling {scaling!r} is not supported for " + _KEPT
    return tuple(float(f) for f in inv_freq.tolist())


def _head_dim(config: Any, kind: str | None) -> int:
    """The head_dim of layers of type `kind` (Gemma 4's full-attention layers are wider: `per_layer_config`)."""
    c = (
        config.per_layer_config[kind]
        if kind is not None and "head_dim" in (getattr(config, "per_layer_attributes", None) or ())
        else config
    )
    return int(getattr(c, "head_dim", None) or config.hidden_size // config.num_attention_heads)


_KEPT = "re-rotating kept keys"


def _sliding_window(config: Any) -> int | None:
    """The window some layer of the model masks (transformers' mask, not the cache's; 0 if unstated), or None."""
    window = _per_layer(config, "sliding_window")
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return int(window or 0)
    return int(window) if window is not None and bool(getattr(config, "use_sliding_window", True)) else None


def _chunk(config: Any) -> int | None:
    """The chunk length of a model with `chunked_attention` layers (Llama 4: a query sees the keys of its own chunk
    of `attention_chunk_size` tokens), or None."""
    if "chunked_attention" not in (getattr(config, "layer_types", None) or ()):
        return None
    return int(_per_layer(config, "attention_chunk_size"))


def _sliding_layers(config: Any) -> tuple[int, ...]:
    """The layers that mask the sliding window: those of type `sliding_attention`, every layer (Mistral) where the
    config names no layer types."""
    types = getattr(config, "layer_types", None)
    if types:
        return tuple(i for i, kind in enumerate(types) if kind == "sliding_attention")
    return tuple(range(int(config.num_hidden_layers)))


def _window_within(cache: KVCache, window: int, layers: Collection[int]) -> bool:
    """Whether `cache` is a window without sinks (`window(size=..., sinks=0)`) no wider than `window` on `layers`:
    it hides every key those layers' sliding window hides, so a query sees no key transformers would mask."""
    sizes, sinks = getattr(cache, "sizes", None), getattr(cache, "sinks", None)
    if not isinstance(sizes, (list, tuple)) or sinks != 0:
        return False
    return all(sizes[layer] <= window for layer in layers if layer < len(sizes))


def _per_layer(c: Any, name: str) -> Any:
    """`c.<name>` (None if absent); on a heterogeneous config (Gemma 4's `per_layer_config`), where transformers
    refuses the global read of a per-layer field, each layer's, which must agree (a field of the model's masks or
    heads: the shapes a layer caches are read by `_each_layer`)."""
    if name not in (getattr(c, "per_layer_attributes", None) or ()):
        return getattr(c, name, None)
    values = _each_layer(c, name)
    if len(set(values)) > 1:
        differ = ", ".join(f"{value} on layer {values.index(value)}" for value in dict.fromkeys(values))
        raise ParameterError(
            f"HFModel: {type(c).__name__} is not served: its layers differ in {name} ({differ}); decodekit's caches "
            f"hold one mask rule and one head count for every layer; allowed: a model whose layers share {name}"
        )
    return values[0]


def _each_layer(c: Any, name: str) -> list[Any]:
    """`c.<name>` of every layer (None where absent): its own on a heterogeneous config (Gemma 4's
    `per_layer_config`), else the config's."""
    if name not in (getattr(c, "per_layer_attributes", None) or ()):
        return [getattr(c, name, None)] * int(c.num_hidden_layers)
    return [getattr(layer, name, None) for layer in c.per_layer_config]


def _not_served(c: Any) -> str | None:
    """Why decodekit's caches cannot hold this model's state, or None (the layer types are checked apart)."""
    if _per_layer(c, "num_attention_heads") is None:
        return (
            "it has no attention heads (a state-space or recurrent model: Mamba, RWKV, ...), whose state needs "
            "transformers' own caches; allowed: a model of attention layers"
        )
    blocks = sorted(set(getattr(c, "block_types", None) or ()) - {"attention"})
    if blocks:  # RecurrentGemma
        return f"its {blocks[0]!r} blocks keep a state that needs transformers' own caches; allowed: attention layers"
    if _latent(c) is not None and getattr(c, "index_topk", None) is not None:  # DeepSeek V3.2, HY V4, GLM-5
        return (  # its indexer writes `cache.update_indexer`
            f"its sparse-attention indexer (index_topk={c.index_topk}) caches keys of its own beside the attention's, "
            "which decodekit's caches do not hold; allowed: a model whose layers cache keys and values only"
        )
    return None


def _latent(c: Any) -> int | None:
    """`kv_lora_rank` of a model of multi-head latent attention (DeepSeek V2/V3), else None. Its layers cache one
    latent "kv-head" per token: "keys" of `kv_lora_rank` dims, "values" (its rotary keys) of `qk_rope_head_dim`."""
    rank = getattr(c, "kv_lora_rank", None)
    return None if rank is None else int(rank)


# Where a config keeps its context length: most configs, GPT-2's family, MPT's.
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len")


def _check_objects(model: Any, tokenizer: Any) -> None:
    """A model and a tokenizer object, not their path (pipeline's habit) nor a class: a path string's `encode` is
    str.encode, which failed at the first prompt as "LookupError: unknown encoding"."""
    load = "AutoModelForCausalLM and AutoTokenizer .from_pretrained(path), or dk.load_model('hf:PATH') for both"
    if not hasattr(model, "config") or isinstance(model, type):
        raise ParameterError(f"HFModel: model={model!r} is invalid; allowed: a transformers model object ({load})")
    if tokenizer is None:
        return
    lacking = [name for name in ("encode", "decode") if not callable(getattr(tokenizer, name, None))]
    if isinstance(tokenizer, type) or "decode" in lacking:  # a class, a path
        raise ParameterError(f"HFModel: tokenizer={tokenizer!r} is invalid; allowed: a tokenizer object ({load})")
    if lacking:  # AutoProcessor's object decodes but does not encode: it failed at the first prompt
        raise ParameterError(
            f"HFModel: tokenizer {type(tokenizer).__name__} has no encode; allowed: a tokenizer object ({load}); "
            "a processor (AutoProcessor) holds one: pass its .tokenizer"
        )


def model_spec(config: Any, context: int | None = None) -> ModelSpec:
    """The `ModelSpec` of a transformers config (the decoder's, for a composite model).

    context: the context length the decode loop allows; None: the config's. It may be smaller than the config's,
    not larger (learned positions have no row past it, rotary ones were not trained past it); a config that states
    none (Bloom: ALiBi) takes any, and needs one."""
    c = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    why = _not_served(c)
    if why is not None:
        raise ParameterError(f"HFModel: {type(c).__name__} is not served: {why}")
    n_heads = int(_per_layer(c, "num_attention_heads"))
    max_positions = _context(c, context)
    layer_types = getattr(c, "layer_types", None) or ()
    other = sorted(set(layer_types) - set(_ATTENTION_LAYERS))
    if other:
        raise ParameterError(
            f"HFModel: layer type {other[0]!r} of {type(c).__name__} is not served: its state is not keys and "
            f"values; allowed: a model whose layers are attention layers ({', '.join(_ATTENTION_LAYERS)})"
        )
    # Gemma 3n's last `num_kv_shared_layers` layers attend over earlier keys: nothing of their own to cache.
    n_layers = int(c.num_hidden_layers) - int(getattr(c, "num_kv_shared_layers", 0) or 0)
    n_heads, shapes = _cached_shape(c, n_heads)
    n_kv_heads, head_dim, width = shapes[0]  # the scalar fields: the first layer's (all layers' where they agree)
    rope = _rope(c, n_layers)
    return ModelSpec(
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        value_dim=None if width == head_dim else width,
        layer_shapes=None if len(set(shapes[:n_layers])) == 1 else shapes[:n_layers],
        vocab_size=int(c.vocab_size),
        max_positions=int(max_positions),
        rope_base=rope[0],
        rope_frequencies=rope[1],
        rope_note=rope[2],
        # Llama 4's query temperature counts cache slots, which a shared prefix's forward puts elsewhere
        splittable=not (_by_length(c) or getattr(c, "attn_temperature_tuning", False)),
    )


# Models whose attention code caches twice `num_key_value_heads` on its sliding layers (MiMo-V2-Flash).
_SLIDING_KV_DOUBLED = ("mimo_v2_flash",)


def _cached_shape(c: Any, n_heads: int) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """`n_heads` and each layer's `(kv-heads, head_dim, value width)` (`ModelSpec.layer_shapes`): its heads and
    kv-heads, or one latent (`_latent`) as one head: every attention head expands keys of its own from it in the
    model's code, so a cache that stores a copy per head (`dense`) would hold n_heads copies of the latent for nothing.
    Layers differ in Gemma 4 (`per_layer_config`: its full-attention layers' `global_head_dim`, and
    `num_global_key_value_heads` under `attention_k_eq_v`) and MiMo-V2-Flash (`_SLIDING_KV_DOUBLED`)."""
    layers = int(c.num_hidden_layers)
    if (rank := _latent(c)) is not None:
        return 1, ((1, rank, int(c.qk_rope_head_dim)),) * layers
    dims = [int(d or c.hidden_size // n_heads) for d in _each_layer(c, "head_dim")]
    heads = [int(h or n_heads) for h in _each_layer(c, "num_key_value_heads")]
    if getattr(c, "model_type", None) in _SLIDING_KV_DOUBLED:
        heads = [2 * h if kind == "sliding_attention" else h for h, kind in zip(heads, c.layer_types)]
    values = [int(w or d) for w, d in zip(_each_layer(c, "v_head_dim"), dims)]  # MiMo-V2-Flash: narrower than keys
    return n_heads, tuple(zip(heads, dims, values))


def _context(c: Any, context: int | None) -> int:
    """The context length: `context` checked against the config's, else the config's."""
    # HFModel(context=...) skips HFParams' check: 12.5 became 12, True 1
    if context is not None and (isinstance(context, bool) or not isinstance(context, Integral) or context < 1):
        raise ParameterError(f"HFModel: context={context!r} is invalid; allowed: None or an int >= 1")
    field = next((name for name in _CONTEXT_FIELDS if getattr(c, name, None) is not None), None)
    if field is None:
        if context is None:
            raise ParameterError(
                f"HFModel: {type(c).__name__} has none of {', '.join(_CONTEXT_FIELDS)}; the decode loop needs the "
                "model's context length; allowed: give one, dk.load_model('hf(context=N):/path') (--model "
                "'hf(context=N):DIR') or HFModel(model, context=N)"
            )
        return context
    limit = int(getattr(c, field))
    if context is not None and context > limit:
        raise ParameterError(
            f"HFModel: context={context} is more than {type(c).__name__}'s {field}={limit}; "
            f"allowed: 1 <= context <= {limit}"
        )
    return limit if context is None else context


class HFModel(nn.Module):
    """A transformers causal LM (`AutoModelForCausalLM`) that speaks decodekit's model protocol.

    model: the transformers model; it is put in eval mode. tokenizer: an optional transformers
    tokenizer, exposed as `self.tokenizer` (decodekit's encode/decode). `self.stop_tokens` holds
    the end-of-sequence ids, to pass as `dk.generate(..., stop_tokens=model.stop_tokens)`.
    calibration: a `calibration.json` for `window(size="auto")` (`load_hf` passes the folder's).
    context: the context length, at most the config's (`model_spec`); None: the config's.

    A model on transformers' SDPA attention is switched to `decodekit_hf.cache_bridge.ATTENTION`,
    which is that same SDPA attention unless a forward's cache evicts or observes; one on eager attention of
    `EAGER_SERVED` (soft-capped or sink attention: Gemma 2, gpt-oss, ...) to `EAGER_ATTENTION`, its eager
    attention likewise.
    """

    spec: ModelSpec
    tokenizer: HFTokenizer | None
    stop_tokens: tuple[int, ...]
    supports_last_only = True  # forward(..., last_only=True) returns the last column only

    def __init__(
        self, model: Any, tokenizer: Any = None, *, calibration: Path | None = None, context: int | None = None
    ) -> None:
        super().__init__()
        _check_objects(model, tokenizer)
        self.hf = model.eval()
        self.spec = replace(model_spec(model.config, context), calibration=calibration)
        config = (
            model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        )
        self._sliding_window = _sliding_window(config)
        self._sliding_layers = _sliding_layers(config)
        self._chunk = _chunk(config)
        self._hf_layers = int(config.num_hidden_layers)  # the cache's layers, and those that share theirs
        self._alibi = bool(getattr(config, "alibi", False))  # Falcon's ALiBi biases ride in the attention mask
        self._latent = _latent(config)
        implementation = model.config._attn_implementation
        if implementation in ("sdpa", ATTENTION):
            register_attention()
            model.set_attn_implementation(ATTENTION)
        elif implementation in ("eager", EAGER_ATTENTION) and getattr(config, "model_type", None) in EAGER_SERVED:
            register_attention()  # its eager attention, and through an evicting cache the same terms
            model.set_attn_implementation(EAGER_ATTENTION)
        self.tokenizer = None if tokenizer is None else HFTokenizer(tokenizer)
        self.stop_tokens = eos_token_ids(model, tokenizer, self.spec.vocab_size)
        # transformers 5.x renamed forward's `past_key_values` to `cache`; ask the signature once.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keeps_logits = "logits_to_keep" in params

    def generation_defaults(self, prompt_length: int | None, keys: Collection[str]) -> dict[str, Any] | None:
        """What the checkpoint's generation config offers `decodekit generate` (its batch job, `explain`) for the
        options among `keys` it is not given: `chain`, `strategy`, `max_new_tokens` (`max_length` where it counts
        the prompt and `prompt_length`, a prompt's tokens, is None) and `stop_strings`, each where the config sets
        it (`checkpoint_options.generation_defaults`); None without a generation config. An option with no
        decodekit form (beam sampling) raises a `ParameterError` naming it."""
        if getattr(self.hf, "generation_config", None) is None:
            return None
        return generation_defaults(self, prompt_length, keys)  # self: its vocabulary bounds suppressed ids

    def forward(
        self, input_ids: Tensor, positions: Tensor, cache: KVCache | None = None, *, last_only: bool = False
    ) -> Tensor:
        """Logits `[B, T, V]` (the model's dtype) for `input_ids` at `positions` (negative: padding).

        last_only: return only the last column, `[B, 1, V]`: the output projection then runs on
        one position per row (transformers' `logits_to_keep=1`), which is what a prefill needs.
        """
        masks_itself = cache is not None and (evicts(cache) or observes(cache))
        kwargs: dict[str, Any] = {}
        attention_mask = None  # no row padded: transformers may use its unmasked causal kernel
        attention = None
        if masks_itself:  # the cache's mask, through the `decodekit` attention function
            assert cache is not None
            self._check_masks_itself(cache)
            attention = CacheAttention(cache, positions)
            positions = positions.clamp(min=0)
        else:
            past = 0 if cache is None else cache.length
            T = input_ids.shape[1]
            first = positions[:, :1]  # [B, 1] position of each row's first new query, in slot `past`
            # slot - position = the row's padding slots (one host read, eagerly). Compiled, the mask is always built:
            # the read would break the graph, and an all-ones mask attends as no mask.
            if torch.compiler.is_compiling() or int(first.min()) < past:
                slots = torch.arange(past + T, device=input_ids.device)  # [S]
                attention_mask = (slots >= past - first).long()  # [B, S]: 0 on padding
                positions = positions.clamp(min=0)
        kwargs[self._cache_arg] = (
            None if cache is None else DecodekitCache(cache, masks_itself, self._hf_layers, type(self.hf).__name__)
        )
        if last_only and self._keeps_logits:
            kwargs["logits_to_keep"] = 1
        with torch.no_grad(), cache_attention(attention) if attention is not None else nullcontext():
            out = self.hf(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=positions,
                use_cache=cache is not None,
                **kwargs,
            )
        if attention is not None:
            self._check_attended(attention)
        logits: Tensor = out.logits
        return logits[:, -1:] if last_only else logits

    def validate_cache(self, cache: KVCache, reach: int) -> None:
        """Refuse, before any forward, a cache this model cannot decode `reach` positions through (the furthest
        prompt's length + its max_new_tokens: every decode asks, `dk.validate` too): one that evicts or observes needs
        decodekit's attention function and mask, and a window of the model's own where its sliding-window (chunked)
        layers would hide keys (docs/concepts.md, "Models")."""
        if evicts(cache) or observes(cache):
            self._check_masks_itself(cache)
            self._check_text(cache, reach)

    def _check_masks_itself(self, cache: KVCache) -> None:
        """A cache that evicts or observes needs the `decodekit` attention function and decodekit's mask."""
        name = cache_name(type(cache))
        if self.hf.config._attn_implementation not in (ATTENTION, EAGER_ATTENTION):
            keep_all = "a cache that keeps every token (dense, gqa, int8)"
            if self.hf._supports_sdpa:
                allowed = f"a model loaded with attn_implementation='sdpa' (the default), or {keep_all}"
            else:  # an architecture with eager attention only (Bloom, XGLM, GPT-Neo, MPT): no other way to load it
                allowed = (
                    f"{keep_all}; {type(self.hf).__name__} has no sdpa attention to load it with, and decodekit "
                    f"reproduces the eager attention of {', '.join(EAGER_SERVED)} only"
                )
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, which needs decodekit's attention function; "
                f"this model runs attn_implementation={self.hf.config._attn_implementation!r}; allowed: {allowed}"
            )
        if self._hf_layers > self.spec.n_layers:  # Gemma 3n, Gemma 4 E2B/E4B
            shared = self._hf_layers - self.spec.n_layers
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, and this model's last {shared} layers "
                f"(num_kv_shared_layers={shared}) attend over all of an earlier layer's keys, which a cache that "
                "evicts or observes does not hand back; allowed: a cache that keeps every token (dense, gqa, int8)"
            )
        if self._latent is not None:
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, and this model's multi-head latent attention "
                f"(kv_lora_rank={self._latent}) caches latents, not the keys and values it attends over (it expands "
                "them from the latents in its own code), so such a cache could neither score nor mask what it holds; "
                "allowed: a cache that keeps every token (dense, gqa, int8)"
            )
        if self._alibi:
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, and this model adds its ALiBi position biases "
                "to transformers' attention mask, which decodekit's attention function does not read; allowed: a "
                "cache that keeps every token (dense, gqa, int8)"
            )

    def _check_text(self, cache: KVCache, text: int) -> None:
        """A text (a row's positions) no longer than the model's window (chunk) is attended whole: its sliding
        (chunked) layers mask nothing; past it, only the model's own window masks as they do. Rows are left-padded,
        so a row's slots are as far apart as its positions: the batch's width does not count."""
        name = cache_name(type(cache))
        if self._chunk is not None and text > self._chunk:  # a chunk's first query sees itself alone: no window does
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, and this model's chunked-attention layers "
                f"(attention_chunk_size={self._chunk}) mask a text of {text} tokens by transformers' rules, which this "
                f"cache cannot follow; allowed: a text of at most {self._chunk} tokens (prompt + max_new_tokens), or a "
                "cache that keeps every token (dense, gqa, int8)"
            )
        if self._sliding_window is None:
            return
        window = self._sliding_window
        if text > window and not _window_within(cache, window, self._sliding_layers):
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, and this model's sliding-window layers "
                f"(sliding_window={window}) mask a text of {text} tokens by transformers' rules, which this cache "
                "cannot follow; allowed: a text of at most sliding_window tokens (prompt + max_new_tokens), the "
                f"model's own window {self._own_window()} (a size at most {window} on the sliding layers), or a "
                "cache that keeps every token (dense, gqa, int8)"
            )

    def _own_window(self) -> str:
        """The `window` cache that masks as this sliding-window model does: its window on the sliding layers, its
        context on the others."""
        window, sliding = self._sliding_window, self._sliding_layers
        assert window is not None  # asked of a sliding-window model only
        sizes = [window if layer in sliding else self.spec.max_positions for layer in range(self.spec.n_layers)]
        return f"window(size={sizes if len(set(sizes)) > 1 else window}, sinks=0)"

    def _check_attended(self, attention: CacheAttention) -> None:
        """Every layer must have attended through the cache: one that attends by its own code saw keys the
        cache may have evicted, under a mask transformers built for the new block only."""
        missed = sorted(set(range(self.spec.n_layers)) - attention.attended)
        if missed:
            kv = attention.kv.kv if isinstance(attention.kv, CopiesView) else attention.kv  # a prompt given twice
            name = cache_name(type(kv))
            raise ParameterError(
                f"HFModel: cache {name} evicts or observes attention, and layer {missed[0]} of "
                f"{type(self.hf).__name__} attends by its own code, not through transformers' attention interface; "
                "allowed: a cache that keeps every token (dense, gqa, int8)"
            )


def _has_tokenizer(path: Path) -> bool:
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    return any((path / name).is_file() for name in names)


@contextmanager
def _no_progress_bar_unless_a_terminal() -> Iterator[None]:
    """transformers draws a "Loading weights" bar on stderr; piped or logged it is only noise, so it is
    off for this load (not for the caller's own loads) when stderr is no terminal."""
    from transformers.utils import logging as hf_logging

    isatty = getattr(sys.stderr, "isatty", None)
    if (isatty is not None and isatty()) or not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def load_hf(argument: str | None, params: HFParams | None = None) -> HFModel:
    """The `hf` model loader: `dk.load_model("hf:/path")`, `dk.load_model("hf(dtype=bfloat16):/path")`, loads a
    local checkpoint directory (`HFParams`: dtype, device, context).

    Local files only (`local_files_only=True`): the model with `AutoModelForCausalLM`, and its
    tokenizer with `AutoTokenizer` when the directory has tokenizer files.
    """
    params = params or HFParams()
    if not argument:
        how = words("dk.load_model('hf:/path/to/local/checkpoint')", "--model hf:/path/to/local/checkpoint")
        raise ParameterError(f"hf: no checkpoint path; allowed: {how}")  # in the words of Python or the CLI
    path = Path(argument).expanduser()
    if not path.is_dir():
        raise ParameterError(f"hf: {argument!r} is not a directory; allowed: a local checkpoint directory")
    if not (path / "config.json").is_file():
        raise ParameterError(
            f"hf: {argument!r} has no config.json; allowed: a folder written by save_pretrained (config.json "
            "and the weights)"
        )
    device = torch_device(params.device)  # before the weights are read: a device torch cannot use is refused first
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _no_progress_bar_unless_a_terminal():
        # dtype "auto" is transformers 5's own default: the config's `dtype`, else the checkpoint's first float weight.
        model: Any = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=params.dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True) if _has_tokenizer(path) else None
    model.to(device)  # not `device_map=`: that needs accelerate, which decodekit-hf does not require
    calibration = path / CALIBRATION_NAME
    return HFModel(model, tokenizer, calibration=calibration if calibration.exists() else None, context=params.context)

"""`DecodekitCache`: a decodekit KV cache seen through transformers' `Cache` API (transformers 5).

transformers' attention calls `cache.update(key_states, value_states, layer_idx)` with the new
`[B, H_kv, T, D]` keys and values and attends over what it returns; the mask code
(`masking_utils.create_causal_mask`) asks `get_query_offset` / `get_seq_length` for the tokens
already held and `get_mask_sizes(q_length, layer)` for the key length and offset, then
combines the causal pattern with the 2-D padding mask `[B, past + T]`.

Every call is forwarded to the decodekit cache, which holds all the memory (its `nbytes`
stays exact): the bridge allocates nothing. A `dense` cache on a grouped-query model stores
each kv-head once per query head (`repeat_interleave`); transformers expects kv-heads and
repeats them itself, so the bridge hands back a strided view with one stored head per group.

A cache that evicts or observes needs decodekit's mask and its queries: transformers' masks
know only contiguous slots. Such a forward runs through the `decodekit` attention function
(registered with transformers' `AttentionInterface`): it asks the cache for its mask, attends
with SDPA and hands the queries to `observe` (`decodekit.cache.cached_attention`, as the
reference GPT does). The bridge then tells transformers' mask code that the block sees only
itself (`get_mask_sizes`), so transformers builds no mask at all. The forward's cache reaches
the function through a thread-local (`cache_attention`), not a keyword: several decoder
layers (StableLM, Nemotron, ...) drop the keywords they are given before they call attention.
Outside `cache_attention` the function is transformers' own SDPA attention. A cache whose steps run
eagerly (the scored caches, `window`: `runs_eagerly`) is written by that function rather than by `cache.update`, the
write and the attention one eager call per layer, so that `compile=True` compiles the same graphs for every layer.

A model that transformers runs on eager attention because SDPA cannot compute it (`EAGER_SERVED`: Gemma 2 and
VaultGemma soft-cap the attention logits, gpt-oss, Flint, MiMo-V2-Flash and the Granite SWA models add a learned sink
logit per head) is switched to `EAGER_ATTENTION`: transformers' eager masks, and outside `cache_attention` the model's
own eager function, so a cache that keeps every token runs as before; through the cache, `softcap` and `s_aux` (the
sinks) are applied to the cache's mask by `eager_terms_attention`, the same arithmetic as transformers' eager
functions.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask, sdpa_mask

from decodekit.cache import Croppable, KVCache, Reorderable, cached_attention, capability_error
from decodekit.compiling import eager
from decodekit.errors import ParameterError

__all__ = [
    "ATTENTION",
    "EAGER_ATTENTION",
    "EAGER_SERVED",
    "CacheAttention",
    "DecodekitCache",
    "DecodekitLayer",
    "cache_attention",
    "decodekit_attention",
    "decodekit_eager_attention",
    "eager_terms_attention",
    "register_attention",
]

ATTENTION = "decodekit"  # the attn_implementation name HFModel gives a model
EAGER_ATTENTION = "decodekit_eager"  # the name it gives a model of `EAGER_SERVED`
# Models on eager attention whose eager function is scaled dot products plus what `eager_terms_attention` applies:
# soft-capping (Gemma 2, VaultGemma: `softcap`), a learned sink logit per head (gpt-oss, Flint, MiMo-V2-Flash's sliding
# layers: `s_aux`; Granite SWA and Granite-MoE SWA scale the output by sigmoid(logsumexp - sink), the same weights). A
# list, not a rule read off the model: an eager function is code, and each one here is checked against
# `eager_terms_attention`.
EAGER_SERVED = ("gemma2", "vaultgemma", "gpt_oss", "flint", "granite_swa", "granitemoe_swa", "mimo_v2_flash")


@dataclass(frozen=True, eq=False)
class CacheAttention:
    """One forward's attention through a decodekit cache: the cache and the new tokens' positions `[B, T]`;
    `attended` collects the layers that attended through it. Hashed by identity: under `compile=True` dynamo
    hashes it while its `__init__` runs, before a field-based hash could read the fields."""

    kv: KVCache
    positions: Tensor
    attended: set[int] = field(default_factory=set)

    def __call__(
        self, layer: int, q: Tensor, k: Tensor, v: Tensor, scale: float | None, terms: dict[str, Any] | None = None
    ) -> Tensor:
        """`[B, H, T, D]`; terms: the attention function's keywords, whose `softcap` / `s_aux` SDPA cannot apply."""
        self.attended.add(layer)
        softcap, sinks = (None, None) if terms is None else (terms.get("softcap"), terms.get("s_aux"))
        if softcap is None and sinks is None:
            return cached_attention(self.kv, layer, q, k, v, self.positions, scale=scale)
        y = eager_terms_attention(q, k, v, self.kv.attention_mask(layer, self.positions), scale, softcap, sinks)
        if (observe := getattr(self.kv, "observe", None)) is not None:  # as `cached_attention` hands them over
            D = q.shape[-1]
            observe(layer, q if scale is None or scale == D**-0.5 else q * (scale * D**0.5))
        return y


def eager_terms_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float | None, softcap: float | None, sinks: Tensor | None
) -> Tensor:
    """transformers' eager attention of Gemma 2 / gpt-oss under decodekit's bool `mask` `[B, 1 or H, T, S]`:
    scores soft-capped (`softcap · tanh(s / softcap)`) before the mask; `sinks` `[H]`, one logit per head that joins
    the softmax and whose weight is dropped. q `[B, H, T, D]`, k and v `[B, H or H_kv, S, D]`; `[B, H, T, D]`."""
    if k.shape[1] != q.shape[1]:  # kv-head h serves query heads h·g ... h·g + g - 1, as transformers' `repeat_kv`
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    scores = (q @ k.transpose(2, 3)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # eager adds this minimum: the same weights
    if sinks is None:
        weights = scores.softmax(-1, dtype=torch.float32).to(q.dtype)
    else:  # gpt-oss's order: the sink column, the row's maximum off, softmax in the scores' dtype
        logits = torch.cat([scores, sinks.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)], -1)
        weights = (logits - logits.amax(-1, keepdim=True)).softmax(-1)[..., :-1].to(v.dtype)
    return weights @ v


class _Active(threading.local):
    """The `CacheAttention` of this thread's forward (None outside `cache_attention`). Not a ContextVar: dynamo
    cannot trace its `get`, which broke the graph in every attention layer under `compile=True`, and each layer's
    attention, a frame of its own, then recompiled per layer (`layer_idx`) up to dynamo's limit, with its warning."""

    attention: CacheAttention | None = None


_ACTIVE = _Active()


@contextmanager
def cache_attention(attention: CacheAttention) -> Iterator[None]:
    """Within this block `decodekit_attention` attends through `attention` (one forward of `HFModel`)."""
    outer, _ACTIVE.attention = _ACTIVE.attention, attention
    try:
        yield
    finally:
        _ACTIVE.attention = outer


def decodekit_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers' attention interface: `[B, T, H, D]`, through the decodekit cache inside `cache_attention`,
    else transformers' SDPA attention unchanged."""
    attention = _ACTIVE.attention
    if attention is None:
        out: tuple[Tensor, None] = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
        return out
    return _through_cache(attention, module, query, key, value, scaling, kwargs), None


def decodekit_eager_attention(
    module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None, **kwargs: Any
) -> tuple[Tensor, Tensor | None]:
    """`decodekit_attention` for a model of `EAGER_SERVED`: outside `cache_attention` its own eager function under
    transformers' eager mask, unchanged."""
    attention = _ACTIVE.attention
    if attention is None:
        own: tuple[Tensor, Tensor | None] = _eager_function(module)(module, query, key, value, attention_mask, **kwargs)
        return own
    return _through_cache(attention, module, query, key, value, kwargs.get("scaling"), kwargs), None


def _eager_function(module: nn.Module) -> Any:
    """The `eager_attention_forward` of `module`'s modeling file (each model family defines its own), or of the
    first base class's (a subclass of the attention defined elsewhere, by a user)."""
    for cls in type(module).__mro__:
        found = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        if found is not None:
            return found
    raise ParameterError(
        f"HFModel: attention module {type(module).__name__} has no eager_attention_forward in its modeling file or "
        "its base classes'; allowed: a subclass of a transformers attention module"
    )


def _through_cache(
    attention: CacheAttention, module: nn.Module, q: Tensor, k: Tensor, v: Tensor, scale: float | None, terms: Any
) -> Tensor:
    """`[B, T, H, D]`: layer `module`'s attention through the cache (`terms`: the attention function's keywords)."""
    if runs_eagerly(attention.kv):  # the whole layer in one eager call: see `runs_eagerly`
        return _whole_layer(attention, module, q, k, v, scale, terms)
    y = attention(int(getattr(module, "layer_idx")), q, k, v, scale, terms)  # noqa: B009  # [B, H, T, D]
    return y.transpose(1, 2).contiguous()


def runs_eagerly(kv: object) -> bool:
    """Whether `kv`'s steps run outside a compiled graph (`runs_eagerly = True`: the scored caches, `window`). Its keys
    are then written by `decodekit_attention`, not by `cache.update`, and with the attention in one eager call per
    layer: the cache's steps called from compiled code would each break the graph, and the frame dynamo resumes
    after a break is specialised on the layer (`self.layer_idx == 3`), recompiled per layer up to dynamo's limit."""
    return bool(getattr(kv, "runs_eagerly", False))


@eager  # see `runs_eagerly`
def _whole_layer(
    attention: CacheAttention, module: nn.Module, q: Tensor, k: Tensor, v: Tensor, scale: float | None, terms: Any
) -> Tensor:
    """Layer `module`'s new keys written to the cache, then its attention through it: `[B, T, H, D]`. The layer
    index is read here, so no compiled code is specialised on it."""
    layer = int(getattr(module, "layer_idx"))  # noqa: B009
    k, v = attention.kv.update(layer, k, v)
    return attention(layer, q, k, v, scale, terms).transpose(1, 2).contiguous()


def register_attention() -> None:
    """Register `decodekit_attention` (and SDPA's masks for it) under `ATTENTION`, `decodekit_eager_attention` (and
    eager's masks) under `EAGER_ATTENTION` with transformers (idempotent)."""
    AttentionInterface.register(ATTENTION, decodekit_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
    AttentionInterface.register(EAGER_ATTENTION, decodekit_eager_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(EAGER_ATTENTION, eager_mask)


class DecodekitLayer(CacheLayerMixin):  # type: ignore[misc,no-untyped-call]  # transformers is untyped
    """Layer `layer` of a decodekit cache, seen by transformers as a full-attention layer.

    masks_itself: the decodekit cache builds the mask (`decodekit_attention`); transformers is told the
    block sees only itself, so its mask code builds nothing.
    """

    is_compileable = False
    is_croppable = True
    is_sliding = False

    def __init__(self, kv: KVCache, layer: int, masks_itself: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.kv = kv
        self.layer = layer
        self.masks_itself = masks_itself
        self.is_initialized = True  # the decodekit cache preallocated its buffers

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        """Nothing to do: the decodekit cache was allocated from its `CacheSpec`."""

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        k, v = self.kv.update(self.layer, key_states, value_states)  # [B, H_stored, S, D]
        repeat = k.shape[1] // key_states.shape[1]
        if repeat > 1:
            # Stored head h holds kv-head h // repeat, so heads 0, repeat, 2·repeat, ... are the kv-heads.
            k, v = k[:, ::repeat], v[:, ::repeat]  # [B, H_kv, S, D], a view
        return k, v

    def get_mask_sizes(self, query: int | Tensor) -> tuple[int, int]:
        """(kv_length, kv_offset): the held tokens plus the new ones, from slot 0.

        `query` is the count of new tokens; early 5.x releases pass their cache positions `[T]`.
        """
        query_length = query if isinstance(query, int) else query.shape[0]
        return (query_length if self.masks_itself else self.kv.length + query_length), 0

    def get_seq_length(self) -> int:
        return self.kv.length

    def get_max_length(self) -> int:
        return self.kv.spec.capacity

    get_max_cache_shape = get_max_length  # its name before transformers 5.x renamed it


class DecodekitCache(Cache):  # type: ignore[misc]
    """A transformers `Cache` whose layers read and write the decodekit cache `kv`.

    Whole-cache operations (reset, crop, reorder) go to `kv` once, not once per layer.
    """

    def __init__(
        self, kv: KVCache, masks_itself: bool = False, n_layers: int | None = None, model: str = "the model"
    ) -> None:
        # n_layers: the model's, when its last layers reuse earlier keys (Gemma 3n): theirs only answer mask sizes.
        count = kv.spec.n_layers if n_layers is None else n_layers
        layers: list[Any] = [DecodekitLayer(kv, layer, masks_itself) for layer in range(count)]
        super().__init__(layers=layers)
        self.kv = kv
        self.model = model  # its class name, for the refusal of a layer of another shape
        self.written_by_attention = masks_itself and runs_eagerly(kv)

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        """The new keys and values as they are when `decodekit_attention` writes them (`runs_eagerly`): the layer
        index is then not read here, in compiled code."""
        self._check_shape(key_states, value_states, layer_idx)
        if self.written_by_attention:
            return key_states, value_states
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def _check_shape(self, k: Tensor, v: Tensor, layer: int) -> None:
        """Refuse a layer whose keys or values are not `[B, kv-heads, T, head_dim]` (values: their width) as the
        config states them for that layer (`CacheSpec.layer_shape`), before the cache is written; a layer past the
        spec's is refused by the cache, naming n_layers."""
        spec = self.kv.spec
        # Compared with the layer only where layers differ: compiled, a branch on `layer` is a guard that each layer's
        # resumed frame fails (a recompile per layer past dynamo's limit under an evicting cache).
        if spec.layer_shapes is not None and layer >= spec.n_layers:
            return
        heads, head_dim, width = spec.layer_shape(layer)
        if k.shape[1] == v.shape[1] == heads and (k.shape[3], v.shape[3]) == (head_dim, width):
            return
        raise ParameterError(
            f"HFModel: layer {layer} of {self.model} caches keys of {k.shape[1]} kv-heads of {k.shape[3]} dims and "
            f"values of {v.shape[1]} of {v.shape[3]}, not the {heads} of head_dim={head_dim} (values: {width}) its "
            f"config states for that layer; allowed: a model whose layers cache what its config states "
            f"(num_key_value_heads, head_dim, v_head_dim, or Gemma 4's per_layer_config)"
        )

    def reset(self) -> None:  # transformers' Cache API; decodekit's caches need not offer it (a new one per decode)
        getattr(self.kv, "reset")()  # noqa: B009

    def crop(self, n: int) -> None:
        """Drop the last `-n` tokens for `n <= 0` (transformers 5.x); keep the first `n` for `n > 0` (as 5.0 did)."""
        length = self.kv.length
        keep = n if n > 0 else length + n
        if not isinstance(self.kv, Croppable):
            raise _refused(self.kv, "crop", "DecodekitCache.crop")
        self.kv.crop(min(max(keep, 0), length))

    def reorder_cache(self, beam_idx: Tensor) -> None:
        if not isinstance(self.kv, Reorderable):
            raise _refused(self.kv, "reorder", "DecodekitCache.reorder_cache")
        self.kv.reorder(beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("DecodekitCache: the batch size is fixed by the decodekit cache's CacheSpec")

    def batch_select_indices(self, indices: Tensor) -> None:
        raise NotImplementedError("DecodekitCache: the batch size is fixed by the decodekit cache's CacheSpec")


def _refused(kv: object, need: str, who: str) -> ParameterError:
    """The error, naming the capability a cache must have, for `kv` that lacks `need`."""
    error = capability_error(kv, need, who)
    assert error is not None  # the caller checked that `kv` lacks it
    return error

"""The KV-cache protocol, its capabilities, `slot_mask`, `cached_attention`, and `PreallocatedKVCache`. A cache's
`attention_mask` says which keys a query sees, so it may keep them in any order: docs/caches.md, "The protocol"."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from decodekit.errors import CacheCapacityError, ParameterError
from decodekit.spec import CacheSpec
from decodekit.storage import FloatStorage, StorageFactory, check_keys, check_memory, float_bytes, loaded, no_take_slots

__all__ = [
    "Croppable",
    "Evicting",
    "KVCache",
    "Observing",
    "PreallocatedKVCache",
    "Reorderable",
    "RowCroppable",
    "Sized",
    "cache_name",
    "cached_attention",
    "capability_error",
    "capacity_error",
    "evicts",
    "observes",
    "row_ends",
    "row_index",
    "slot_mask",
]


@runtime_checkable
class KVCache(Protocol):
    """What every cache must do: what a model's attention and the engine call on it."""

    spec: CacheSpec

    @property
    def length(self) -> int:
        """Slots fed per row (every layer, after a complete forward): the slot of the next token."""

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Feed `k`, `v` `[B, H_kv, T_new, D]` (rotated at their positions) to `layer`; return the keys and
        values to attend over, `[B, H_stored, S, D]` in `spec.dtype`."""

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        """`[B, 1, T_new, S]` bool (or `[B, n_heads, T_new, S]`, one per query head): which keys of the last
        `update(layer)` each new query, at `positions` `[B, T_new]` (negative: padding), may attend to."""


# Capabilities: what some caches can also do, checked when a decode opens (`capability_error`; docs/caches.md).


@runtime_checkable
class Evicting(Protocol):
    """A cache that drops tokens. A cache without `reach` keeps every token fed, in slot order."""

    def reach(self, new: int) -> int:
        """1 + the largest query-key distance (in positions) that feeding `new` more tokens presents."""


@runtime_checkable
class Croppable(Protocol):
    """A cache that can take tokens back (speculative decoding's rollback)."""

    @property
    def rollback(self) -> int:
        """How many of the latest slots `crop` can always take back (`sys.maxsize`: any)."""

    def crop(self, n: int) -> None:
        """Take back every slot from `n` on: `length` becomes `n`."""


@runtime_checkable
class RowCroppable(Protocol):
    """A cache that can also roll rows back by different amounts (speculative decoding, batched)."""

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        """Keep row `b`'s slots before `ends[b]`, moved so that they end at slot `length`, the new length (at least
        each row's count of real tokens): rows stay right-aligned, what a row holds before its own tokens is padding
        that the model masks by positions (docs/speculative.md, "Batches: rows that advance unevenly")."""


@runtime_checkable
class Reorderable(Protocol):
    """A cache whose rows can follow beams."""

    def reorder(self, index: Tensor) -> None:
        """Replace row `i` by row `index[i]` (beam search)."""


@runtime_checkable
class Observing(Protocol):
    """A cache that scores its entries from attention (H2O, TOVA, SnapKV): the model hands it its queries."""

    def observe(self, layer: int, queries: Tensor) -> None:
        """`queries` `[B, n_heads, T_new, D]`: the new queries of the last `update(layer)`, rotated as attended,
        after the model attended, so the cache may then change what it holds (docs/caches.md: the weights)."""


@runtime_checkable
class Sized(Protocol):
    """A cache that reports its memory."""

    @property
    def nbytes(self) -> int:
        """Exact bytes of the tensors the cache holds (not of the float keys `update` hands out)."""


_CAPABILITIES: dict[str, tuple[type, str]] = {
    "crop": (Croppable, "takes back rejected tokens with crop(n)"),
    "crop_rows": (RowCroppable, "takes back a different number of tokens per row with crop_rows(ends, length)"),
    "reorder": (Reorderable, "moves its rows after the beams with reorder(index)"),
    "nbytes": (Sized, "reports its bytes with nbytes"),
}


def row_index(cache: str, index: object, batch_size: int) -> Tensor:
    """`index` of `reorder`, checked: a 1-D integer tensor of `batch_size` rows, each in `[0, batch_size)`, returned
    as given; else a `ParameterError` naming `{cache}.reorder` (`cache`: the cache as the message names it)."""
    if (
        isinstance(index, Tensor)
        and index.dim() == 1
        and index.numel() == batch_size
        and not (index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool)
        and all(0 <= row < batch_size for row in index.tolist())
    ):
        return index
    shown: object = type(index).__name__
    if isinstance(index, Tensor):
        shown = index.tolist() if index.numel() <= 16 else f"of shape {tuple(index.shape)}"
    raise ParameterError(
        f"{cache}.reorder: index {shown} is invalid; allowed: a 1-D integer tensor of {batch_size} rows, each in "
        f"[0, {batch_size})"
    )


def row_ends(cache: str, ends: Sequence[int], length: int, n: int, batch_size: int) -> list[int]:
    """`ends` and `length` of `crop_rows` on a cache whose `length` is `n` (the slots fed so far, which an evicting
    cache keeps counting past the slots it holds), checked: `batch_size` ends and a length, each in `0..n`; the ends
    returned as a list, else a `ParameterError` naming `{cache}.crop_rows` (`cache`: the cache as the message names
    it)."""
    if not 0 <= length <= n or any(not 0 <= e <= n for e in ends) or len(ends) != batch_size:
        raise ParameterError(
            f"{cache}.crop_rows: ends={list(ends)}, length={length} are invalid; "
            f"allowed: {batch_size} ends and a length, each in 0..{n}"
        )
    return list(ends)


def evicts(cache: object) -> bool:
    """Whether `cache` (an instance or its class; None, no cache, does not) drops tokens: it states its `reach`."""
    return callable(getattr(cache, "reach", None))


def observes(cache: object) -> bool:
    """Whether `cache` (an instance or its class) wants the model's queries: it has `observe` (`Observing`)."""
    return callable(getattr(cache, "observe", None))


def cache_name(cls: type) -> str:
    """How a user names the cache backend `cls` (`cache="gqa"`): the name a plugin registered it under, else its
    class's name."""
    from decodekit.plugins import get_registry  # the registry: read only to word a message

    path = f"{cls.__module__}:{cls.__qualname__}"  # how a plugin registers its class, without importing it
    return next((n for n, e in get_registry().caches.items() if e.impl is cls or e.impl == path), cls.__name__)


def capability_error(cache: object, need: str, who: str) -> ParameterError | None:
    """None when `cache` has capability `need` ("crop", "crop_rows", "reorder", "nbytes"), else the error
    that refuses it, naming the cache as the user did, what `who` (a strategy) needs it for, and the installed
    backends that offer it, read from their classes as `evicts(impl)` reads one (no cache is created)."""
    protocol, why = _CAPABILITIES[need]
    if isinstance(cache, protocol):
        return None
    from decodekit.plugins import get_registry  # the registry: read only to word a refusal

    offering = sorted(n for n, e in get_registry().caches.items() if isinstance(loaded(e), protocol))
    return ParameterError(
        f"{who}: cache {cache_name(type(cache))} cannot be used: {who} needs a cache that {why}; allowed: a cache "
        f"backend with {need} (installed: {', '.join(offering) or 'none'})"
    )


def capacity_error(cache: str, layer: int, held: int, new: int, capacity: int) -> CacheCapacityError:
    """The refusal of `new` tokens at `layer`, which holds `held`, past `capacity`: one message for every cache."""
    if held == 0:
        fed, allowed = f"a prompt of {new} tokens", f"a prompt of at most {capacity}"
    else:
        fed, allowed = f"{new} more tokens after {held}", f"at most {capacity - held} more"
    return CacheCapacityError(
        f"{cache}: layer {layer} got {fed}, past its capacity of {capacity}; allowed: {allowed}, or a cache of a "
        "larger CacheSpec.capacity (the engine sizes it as prompt + max_new_tokens)"
    )


def slot_mask(key_slots: Tensor, positions: Tensor, first: int, *, window: int | None = None, sinks: int = 0) -> Tensor:
    """`[B, 1, T, S]` bool: may the query in slot `first + i` attend to the key in slot `key_slots[..., j]`?
    key_slots `[S]`, `[B, S]` or `[B, H, S]` (the mask then `[B, H, T, S]`), -1 for no key; the rule, `window`
    and `sinks`: docs/caches.md (the model ↔ cache contract, *Masks*). On `positions`' device (a model's
    `torch.arange(T)` of key slots is on the CPU)."""
    T = positions.shape[1]
    key_slots = key_slots.to(positions.device)  # no copy where it is there already
    q = torch.arange(first, first + T, device=positions.device)[:, None]  # [T, 1]
    row_start = (q[:, 0] - positions).unsqueeze(-1)  # [B, T, 1]
    if key_slots.dim() == 3:  # [B, H, S] -> [B, H, 1, S] against [B, 1, T, 1]
        key_slots, q, row_start = key_slots.unsqueeze(2), q[None, None], row_start.unsqueeze(1)
    elif key_slots.dim() == 2:
        key_slots = key_slots.unsqueeze(1)  # [B, 1, S]
    mask = (key_slots >= row_start) & (key_slots <= q)  # [B, (H,) T, S]
    if window is not None:
        mask &= (key_slots < row_start + sinks) | (key_slots > q - window)  # a row's sinks: its first tokens
    mask |= key_slots == q
    return mask if mask.dim() == 4 else mask.unsqueeze(1)


def cached_attention(
    cache: KVCache, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, *, scale: float | None = None
) -> Tensor:
    """A model's attention over what `cache.update(layer, ...)` returned (`k`, `v` `[B, H_stored, S, D]`):
    the cache's mask, SDPA, then the queries `q` `[B, H, T, D]` to a cache that observes. `[B, H, T, D]`.

    scale: the model's softmax scale (None: `1/sqrt(D)`). Caches without `observe` pay one getattr.
    """
    if q.dtype != k.dtype:  # e.g. a rotary embedding in float32, not cast back: torch's error would not say why
        raise ParameterError(
            f"cached_attention: queries in {q.dtype} are invalid: cache.update returns keys and values in the cache's "
            f"dtype, {k.dtype} (the model's); allowed: queries in {k.dtype} (cast a float32 rotary embedding back)"
        )
    mask = cache.attention_mask(layer, positions)  # [B, 1 or H, T, S]
    gqa = True if k.shape[1] != q.shape[1] else False  # noqa: SIM210  # a branch: dynamo guards a SymBool it cannot pass
    if gqa and q.shape[1] % k.shape[1]:  # SDPA's error would name no party
        raise _heads_error(cache, layer, q.shape[1], k.shape[1])
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    if (observe := getattr(cache, "observe", None)) is not None:
        D = q.shape[-1]
        observe(layer, q if scale is None or scale == D**-0.5 else q * (scale * D**0.5))
    return y


def _heads_error(cache: KVCache, layer: int, q_heads: int, k_heads: int) -> ParameterError:
    """Queries whose heads the returned keys' do not divide: a spec's n_heads that is not the model's (`dense` stores
    n_heads), or a model whose kv-heads do not divide its query heads."""
    n_heads = cache.spec.n_heads
    if n_heads != q_heads:
        return ParameterError(
            f"ModelSpec: n_heads={n_heads} is invalid: the model's layer {layer} attends with queries of {q_heads} "
            f"heads ([B, H, T, D]) over the {k_heads} key heads cache.update returned; allowed: n_heads={q_heads}, "
            "as the model's queries"
        )
    return ParameterError(
        f"cached_attention: queries of {q_heads} heads over {k_heads} key heads (layer {layer}) are invalid; allowed: "
        "key heads that divide the query heads (grouped-query attention)"
    )


class PreallocatedKVCache:
    """A cache that keeps every token fed, in slot order, in a storage of `capacity` slots per layer (a subclass
    chooses it: docs/caches.md, "Storage and eviction are separate"); a write is one slice copy, at any position."""

    storage: StorageFactory = FloatStorage
    rollback = sys.maxsize  # crop takes back any number of slots

    def __init__(self, spec: CacheSpec, params: object = None) -> None:
        self.spec = spec
        slots = [spec.capacity] * spec.n_layers
        nbytes = float_bytes(spec, slots)  # the kv-heads in spec.dtype
        check_memory(f"cache {cache_name(type(self))}", f"capacity={spec.capacity}", nbytes, spec.device)
        # A subclass may pick its storage by a parameter, setting `self.storage` before this; the class's stays the
        # default (what `store=NAME` names). Read from the class otherwise: a function there would bind as a method.
        factory: StorageFactory = vars(self).get("storage", type(self).storage)
        self.store = factory(spec, slots)
        # Slots fed per layer; host-side, so reading it never syncs with the device.
        self._lengths = [0] * spec.n_layers
        self._mask_for: tuple[int, Tensor] | None = None  # (first slot, positions) of `_mask`
        self._mask = torch.empty(0)
        self._slots = torch.arange(spec.capacity, device=spec.device)

    @property
    def length(self) -> int:
        return self._lengths[-1]

    @property
    def capacity(self) -> int:
        """The length past which `update` refuses (`CacheCapacityError`); `sys.maxsize` for a cache that never does."""
        return self.spec.capacity

    @property
    def nbytes(self) -> int:
        return self.store.nbytes

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        try:
            start = self._lengths[layer]
        except IndexError:  # a layer past the spec's: refused naming n_layers
            check_keys(self.spec, layer, k)
            raise
        end = start + k.shape[2]
        if end > self.spec.capacity:
            raise capacity_error(type(self).__name__, layer, start, k.shape[2], self.spec.capacity)
        self.store.write(layer, start, k, v)
        self._lengths[layer] = end
        return self.store.read(layer, 0, end)

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        end = self._lengths[layer]
        first = end - positions.shape[1]
        # Every layer of one forward asks the same question: answer it once.
        if (memo := self._mask_for) is None or memo[0] != first or memo[1] is not positions:
            self._mask = slot_mask(self._slots[:end], positions, first)
            self._mask_for = (first, positions)
        return self._mask

    def reset(self) -> None:
        self._lengths = [0] * self.spec.n_layers
        self._mask_for = None

    def crop(self, n: int) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= self.length:
            raise ParameterError(
                f"{type(self).__name__}.crop: n={n!r} is invalid; allowed: an int, 0 <= n <= {self.length}"
            )
        self._lengths = [min(length, n) for length in self._lengths]
        self._mask_for = None

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        n = self.length
        ends = row_ends(type(self).__name__, ends, length, n, self.spec.batch_size)
        if all(e == length for e in ends):  # every row kept the same count: a plain crop
            self.crop(length)
            return
        take = getattr(self.store, "take_slots", None)
        if take is None:
            raise no_take_slots(f"{type(self).__name__}.crop_rows", self.store)
        # Slot s of row b takes old slot s + ends[b] - length; slots before the row's data (padding) read slot 0.
        shift = torch.tensor([e - length for e in ends], device=self.spec.device)[:, None]  # [B, 1]
        take((torch.arange(length, device=self.spec.device)[None, :] + shift).clamp_(min=0), n)
        self._lengths = [length] * self.spec.n_layers
        self._mask_for = None

    def reorder(self, index: Tensor) -> None:
        index = row_index(type(self).__name__, index, self.spec.batch_size)
        self.store.reorder(index, max(self._lengths))

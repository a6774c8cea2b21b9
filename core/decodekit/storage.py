"""Storage: how a cache holds its keys and values, apart from which tokens it keeps (eviction), so a policy runs over
any storage it can write (`window` and the scored caches: any with `write_at`, `SlotWritable`): docs/caches.md,
"Storage and eviction are separate"."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import Tensor

from decodekit.errors import DecodekitError, ParameterError
from decodekit.spec import CacheSpec

if TYPE_CHECKING:
    from decodekit.registry import Entry

__all__ = [
    "FloatStorage",
    "SlotWritable",
    "Storage",
    "StorageFactory",
    "check_keys",
    "check_memory",
    "float_bytes",
    "lookup_storage",
    "no_take_slots",
    "take_slots",
]


@runtime_checkable
class Storage(Protocol):
    """Keys and values addressed by slot; `read` gives them back in the cache's dtype."""

    @property
    def nbytes(self) -> int:
        """Exact bytes of every tensor the storage holds."""

    @property
    def heads(self) -> int:
        """Heads stored per slot: `spec.n_kv_heads`, or `spec.n_heads` for a storage that repeats them (`dense`'s).
        One count for every layer: where `spec.layer_shapes` is set, each layer stores its own kv-heads and this
        is the count for `spec.n_kv_heads` (layer 0's, as the Hugging Face bridge sets it). decodekit reads it
        nowhere: `window(store=...)` and the scored caches take a storage without it, and the kit's `test_write_at`
        checks such a storage's `write_at` all the same."""

    def write(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        """Store the model's kv-heads `k` `[B, H_kv, T, D]`, `v` `[B, H_kv, T, spec.value_width]` in slots
        `start .. start + T - 1` (the standard storages check them with `check_keys` on a layer's first write,
        `start == 0`)."""

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        """Keys `[B, heads, stop - start, D]` and values `[B, heads, stop - start, spec.value_width]` of slots
        `start .. stop - 1` (each layer in its own shape where `spec.layer_shapes` says), in `spec.dtype`."""

    def reorder(self, index: Tensor, stop: int) -> None:
        """Replace row `i` by row `index[i]` in slots `0 .. stop - 1`."""


@runtime_checkable
class SlotWritable(Protocol):
    """A storage that writes each row and kv-head to slots of its own: `window` (each row's ring) and the scored
    caches (`h2o`, `tova`, `snapkv`, `knorm`, `streaming`: per row and kv-head) refuse a `store=` without it."""

    def write_at(self, layer: int, index: Tensor, k: Tensor, v: Tensor) -> None:
        """Store `k` `[B, H_kv, T, D]`, `v` `[B, H_kv, T, spec.value_width]` in slots `index` `[B, H_kv, T]` (row
        b, kv-head h: slots index[b, h]; a storage that repeats the kv-heads writes each one's copies there)."""


StorageFactory = Callable[[CacheSpec, Sequence[int]], Storage]
"""`factory(spec, slots)`: a storage of `slots[l]` slots per row for each layer `l`."""


class FloatStorage:
    """Keys and values in `spec.dtype`, per layer a key buffer `[B, H_kv, slots, D]` and a value buffer (values:
    `spec.value_width` wide; each layer's own shape where `spec.layer_shapes` says); `read` is a view of them, and
    it has both optional members, `write_at` and `take_slots`."""

    def __init__(self, spec: CacheSpec, slots: Sequence[int]) -> None:
        self.spec = spec
        shapes = [spec.layer_shape(layer) for layer in range(len(slots))]
        self.keys = [self._buffer(n, self._heads(h), d) for n, (h, d, _) in zip(slots, shapes)]
        self.values = [self._buffer(n, self._heads(h), w) for n, (h, _, w) in zip(slots, shapes)]

    def _buffer(self, slots: int, heads: int, width: int) -> Tensor:
        spec = self.spec
        return torch.zeros(spec.batch_size, heads, slots, width, dtype=spec.dtype, device=spec.device)

    def _heads(self, kv_heads: int) -> int:
        """Heads stored per slot on a layer of `kv_heads` kv-heads."""
        return kv_heads

    @property
    def heads(self) -> int:
        return self._heads(self.spec.n_kv_heads)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def _stored(self, x: Tensor) -> Tensor:
        return x

    def write(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        if start == 0:  # a layer's first write: checked once
            check_keys(self.spec, layer, k, v)
        end = start + k.shape[2]
        self.keys[layer][:, :, start:end].copy_(self._stored(k))
        self.values[layer][:, :, start:end].copy_(self._stored(v))

    def write_at(self, layer: int, index: Tensor, k: Tensor, v: Tensor) -> None:
        repeat = self.keys[layer].shape[1] // index.shape[1]
        where = index.repeat_interleave(repeat, 1) if repeat > 1 else index
        where = where.unsqueeze(-1)  # [B, heads, T, 1]
        for buf, x in ((self.keys[layer], k), (self.values[layer], v)):
            buf.scatter_(2, where.expand(-1, -1, -1, buf.shape[3]), self._stored(x).to(buf.dtype))  # as `write` casts

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        if start == 0 and stop == self.keys[layer].shape[2]:
            # The buffers themselves: under torch.compile (2.13) a step that kept a slice spanning a buffer it
            # had just written failed in AOT autograd ("incorrect out shape after application of ViewMeta").
            return self.keys[layer], self.values[layer]
        return self.keys[layer][:, :, start:stop], self.values[layer][:, :, start:stop]

    def reorder(self, index: Tensor, stop: int) -> None:
        index = index.to(self.keys[0].device)
        for buf in (*self.keys, *self.values):
            buf[:, :, :stop] = buf[:, :, :stop].index_select(0, index)

    def take_slots(self, source: Tensor, stop: int) -> None:
        """Slot `s` of row `b` becomes old slot `source[b, s]` (of slots `0 .. stop - 1`): the module's `take_slots`
        over its buffers."""
        take_slots([*self.keys, *self.values], source, stop)


def take_slots(buffers: Sequence[Tensor], source: Tensor, stop: int) -> None:
    """For each `[B, H, S, X]` buffer: slot `s` of row `b` becomes old slot `source[b, s]`, for `source` `[B, n]` of
    slots `0 .. stop - 1` (slots from `n` on are left as they were): what a storage's optional `take_slots(source,
    stop)` does, with which `crop_rows` moves rows (`PreallocatedKVCache`'s, a scored cache's under `prefill_only`:
    speculative decoding of a batch, a shared prefix's layout)."""
    n = source.shape[1]
    for buf in buffers:
        index = source[:, None, :, None].expand(-1, buf.shape[1], -1, buf.shape[3])
        buf[:, :, :n] = buf[:, :, :stop].gather(2, index)


def no_take_slots(owner: str, store: object) -> ParameterError:
    """The refusal of `owner`'s `crop_rows` over a storage without `take_slots` (an optional member), where it would
    move rows."""
    return ParameterError(
        f"{owner}: its storage {type(store).__name__} has no take_slots; allowed: a storage with take_slots(source, "
        "stop), which moves each row's slots (decodekit.storage.take_slots does it for its [B, H, slots, ...] "
        "buffers), as FloatStorage and Int8Storage have"
    )


def check_keys(spec: CacheSpec, layer: int, k: Tensor, v: Tensor | None = None) -> None:
    """Refuse keys (and values) a model feeds `update` where its `ModelSpec` says otherwise, naming the field (else a
    torch error deep inside a cache, or none): storages call it on a layer's first write (slot 0), caches on a layer
    too many."""
    if not 0 <= layer < spec.n_layers:
        raise ParameterError(
            f"ModelSpec: n_layers={spec.n_layers} is invalid: the model fed cache.update(layer={layer}); allowed: "
            f"n_layers > {layer}, one per layer that feeds the cache"
        )
    if spec.layer_shapes is not None:
        _check_layer(spec, layer, k, v)
        return
    for name, said, at in (("n_kv_heads", spec.n_kv_heads, 1), ("head_dim", spec.head_dim, 3)):
        if k.dim() == 4 and (fed := k.shape[at]) != said:
            raise ParameterError(
                f"ModelSpec: {name}={said} is invalid: the model's layer {layer} fed cache.update keys of "
                f"{k.shape[1]} kv-heads of {k.shape[3]} dims ([B, H_kv, T, D]); allowed: {name}={fed}, as the model "
                "feeds them"
            )
    if v is not None and v.dim() == 4 and (width := v.shape[3]) != spec.value_width:
        raise ParameterError(
            f"ModelSpec: value_dim={spec.value_dim} is invalid: the model's layer {layer} fed cache.update values of "
            f"{width} dims ([B, H_kv, T, value_dim]), keys of head_dim={spec.head_dim}; allowed: "
            f"value_dim={None if width == spec.head_dim else width}, as the model feeds them (None: head_dim)"
        )


def _check_layer(spec: CacheSpec, layer: int, k: Tensor, v: Tensor | None) -> None:
    """`check_keys` where layers differ in shape (`spec.layer_shapes`): the layer's own, named by its index."""
    if k.dim() != 4 or (v is not None and v.dim() != 4):
        return
    said = spec.layer_shape(layer)
    fed = (k.shape[1], k.shape[3], said[2] if v is None else v.shape[3])
    if fed != said:
        raise ParameterError(
            f"ModelSpec: layer_shapes[{layer}]={said} is invalid: the model's layer {layer} fed cache.update keys of "
            f"{fed[0]} kv-heads of {fed[1]} dims and values of {fed[2]} ((kv-heads, head_dim, value width)); "
            f"allowed: layer_shapes[{layer}]={fed}, as the model feeds them"
        )


def float_bytes(spec: CacheSpec, slots: Sequence[int]) -> int:
    """Bytes of keys and values in `spec.dtype` of `slots[l]` slots per row and kv-head on layer `l`."""
    widths = [h * (d + w) for h, d, w in map(spec.layer_shape, range(len(slots)))]
    return spec.batch_size * sum(n * width for n, width in zip(slots, widths)) * spec.dtype.itemsize


def device_memory(device: torch.device | str) -> int | None:
    """Total memory of `device` in bytes (a CPU: the machine's RAM), None where unknown."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type == "cpu" and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):  # a name this system does not define
            return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return None


def check_memory(owner: str, what: str, nbytes: int, device: torch.device | str) -> None:
    """Refuse, before allocating, a cache of `nbytes` that the device could never hold: a `ParameterError`
    naming `what` (the parameters that asked for it)."""
    if (total := device_memory(device)) is not None and nbytes > total:
        raise ParameterError(
            f"{owner}: {what} is invalid: the cache would allocate {nbytes / 2**30:,.1f} GiB, more than the "
            f"{total / 2**30:,.1f} GiB of memory of device {torch.device(device)}; "
            "allowed: values whose cache fits in memory"
        )


def lookup_storage(name: str, cache: str | None = None) -> StorageFactory:
    """The storage of the registered cache backend `name` (its implementation's `storage` attribute), for the
    `store=` parameter of `cache` (a backend's name, which a refusal starts with): a `ParameterError` where `name`
    is no registered backend or one without a `storage`, naming the installed backends that have one."""
    from decodekit.plugins import get_registry

    entries = get_registry().caches
    storage: StorageFactory | None = getattr(entries[name].load(), "storage", None) if name in entries else None
    if storage is not None:
        return storage
    own = f": cache backend {name!r} keeps no storage of its own (no `storage` attribute)" if name in entries else ""
    storages = [n for n, e in entries.items() if getattr(loaded(e), "storage", None) is not None]
    raise ParameterError(
        f"{'' if cache is None else f'cache {cache}: '}store={name!r} is invalid{own}; allowed: a storage "
        f"backend ({', '.join(sorted(storages)) or 'none'})"
    )


def loaded(entry: Entry) -> object:
    """The implementation of `entry`, for a listing of what is installed: None where its plugin fails to import."""
    try:
        return entry.load()
    except DecodekitError:
        return None

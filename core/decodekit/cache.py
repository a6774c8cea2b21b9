"""The KV-cache protocol and `PreallocatedKVCache`, the base the standard backends share.

Layout: one key and one value buffer per layer, `[B, H_stored, capacity, D]`,
allocated once. Every row of a batch holds the same number of slots (ragged
prompts are left-padded by the decode loop, and the model masks the padding),
so a write is one slice copy at the same offset for every row: appending at
position 2,000 costs what it costs at position 20.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from decodekit.errors import CacheCapacityError, ParameterError
from decodekit.spec import CacheSpec

__all__ = ["KVCache", "PreallocatedKVCache", "RowCroppable"]


@runtime_checkable
class KVCache(Protocol):
    """What a model's attention and the decode loop need from a KV cache."""

    spec: CacheSpec

    @property
    def length(self) -> int:
        """Tokens held per row (every layer holds this many after a complete forward)."""
        ...

    @property
    def capacity(self) -> int:
        """The most tokens a row can hold."""
        ...

    @property
    def nbytes(self) -> int:
        """Exact bytes of the tensors the cache holds."""
        ...

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append `k`, `v` `[B, H_kv, T_new, D]` to `layer`; return the keys and values to attend over."""
        ...

    def reset(self) -> None:
        """Forget every token (buffers are kept)."""
        ...

    def crop(self, n: int) -> None:
        """Keep only the first `n` tokens of every row (speculative-decoding rollback)."""
        ...

    def reorder(self, index: Tensor) -> None:
        """Replace row `i` by row `index[i]` (beam search)."""
        ...


@runtime_checkable
class RowCroppable(Protocol):
    """A cache that can also roll rows back by different amounts (speculative decoding, batched)."""

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        """Keep row `b`'s slots before `ends[b]`, moved so that they end at slot `length`, the new length.

        Rows stay right-aligned: what a row then holds before its own tokens is padding, which the
        model masks by positions (the slots `length - ends[b]` further left or right hold the same
        keys and values, since they depend on positions, not slots). The caller keeps every row's
        real tokens: `length` is at least each row's count of them.
        """
        ...


class PreallocatedKVCache:
    """A KV cache with fixed buffers of `stored_heads` heads per layer.

    Subclasses choose how many heads they store (`n_heads` for a dense cache,
    `n_kv_heads` for a GQA-shared one) and how to turn the model's kv-heads
    into stored heads (`_to_stored`).
    """

    def __init__(self, spec: CacheSpec, stored_heads: int) -> None:
        self.spec = spec
        self.stored_heads = stored_heads
        shape = (spec.batch_size, stored_heads, spec.capacity, spec.head_dim)
        # keys[l], values[l]: [B, H_stored, capacity, D]
        self.keys = [torch.zeros(shape, dtype=spec.dtype, device=spec.device) for _ in range(spec.n_layers)]
        self.values = [torch.zeros(shape, dtype=spec.dtype, device=spec.device) for _ in range(spec.n_layers)]
        # Tokens written per layer; host-side, so reading it never syncs with the device.
        self._lengths = [0] * spec.n_layers

    def _to_stored(self, x: Tensor) -> Tensor:
        """Turn model kv-heads `[B, H_kv, T, D]` into stored heads `[B, H_stored, T, D]`."""
        return x

    @property
    def length(self) -> int:
        return self._lengths[-1]

    @property
    def capacity(self) -> int:
        return self.spec.capacity

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    @property
    def bytes_per_token(self) -> int:
        """Bytes one more token of one row costs: 2 · layers · stored heads · head_dim · element size."""
        s = self.spec
        return 2 * s.n_layers * self.stored_heads * s.head_dim * self.keys[0].element_size()

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        start = self._lengths[layer]
        end = start + k.shape[2]
        if end > self.spec.capacity:
            raise CacheCapacityError(
                f"{type(self).__name__}: layer {layer} holds {start} tokens and got {k.shape[2]} more, "
                f"past its capacity of {self.spec.capacity}; create the cache with a larger capacity"
            )
        self.keys[layer][:, :, start:end].copy_(self._to_stored(k))
        self.values[layer][:, :, start:end].copy_(self._to_stored(v))
        self._lengths[layer] = end
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def reset(self) -> None:
        self._lengths = [0] * self.spec.n_layers

    def crop(self, n: int) -> None:
        if not 0 <= n <= self.length:
            raise ParameterError(f"{type(self).__name__}.crop: n={n} is invalid; allowed: 0 <= n <= {self.length}")
        self._lengths = [min(length, n) for length in self._lengths]

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        n = self.length
        if not 0 <= length <= n or any(not 0 <= e <= n for e in ends) or len(ends) != self.spec.batch_size:
            raise ParameterError(
                f"{type(self).__name__}.crop_rows: ends={list(ends)}, length={length} are invalid; "
                f"allowed: {self.spec.batch_size} ends and a length, each in 0..{n}"
            )
        if all(e == length for e in ends):  # every row kept the same count: a plain crop
            self.crop(length)
            return
        # Slot s of row b takes old slot s + ends[b] - length; slots before the row's data (padding) read slot 0.
        device = self.keys[0].device
        shift = torch.tensor([e - length for e in ends], device=device)[:, None]  # [B, 1]
        source = (torch.arange(length, device=device)[None, :] + shift).clamp_(min=0)  # [B, length]
        for buf in (*self.keys, *self.values):
            index = source[:, None, :, None].expand(-1, buf.shape[1], -1, buf.shape[3])
            buf[:, :, :length] = buf[:, :, :n].gather(2, index)
        self._lengths = [length] * self.spec.n_layers

    def reorder(self, index: Tensor) -> None:
        if index.dim() != 1 or index.numel() != self.spec.batch_size:
            raise ParameterError(
                f"{type(self).__name__}.reorder: index of shape {tuple(index.shape)} is invalid; "
                f"allowed: a 1-D index of {self.spec.batch_size} rows"
            )
        index = index.to(self.keys[0].device)
        n = self.length
        for buf in (*self.keys, *self.values):
            buf[:, :, :n] = buf[:, :, :n].index_select(0, index)

"""`WindowCache`: the first `sinks` tokens plus the most recent `size` tokens of each layer.

Layout per layer, in storage slots: `[0, sinks)` the sinks, then a ring of `size + slack - 1`
recent tokens (stream slot `t >= sinks` lives in ring slot `(t - sinks) % ring`). Memory is
fixed once the ring is full, and an append writes one slot and reads the same number of
slots at token 100,000 as at token 100. `_slots[l]` records the stream slot each storage
slot holds (-1: none), which is all `attention_mask` needs: keys come back in storage order.

Positions (StreamingLLM, Xiao et al. 2024): keys arrive rotated at their own positions and
are stored that way. Recent keys stay right (a query at `p` sees them at distances below
`size`); once tokens between the sinks and a query's window are gone, the sinks are moved,
on the way out, to sit just before that window (`decodekit.rope.rotate`, from the stored
originals, so nothing accumulates). Each query of a block gets its own moved copy of the
sinks (visible to it alone), so a block of any length is attended exactly as one token at a
time would be, and no query ever sees a distance of `size + sinks` or more.
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor

from decodekit.cache import row_index, slot_mask
from decodekit.errors import ParameterError
from decodekit.rope import apply_rope, rope_angles, rotate
from decodekit.spec import CacheSpec
from decodekit.storage import check_keys, lookup_storage
from decodekit_cache_window.params import WindowParams
from decodekit_cache_window.sizes import layer_sizes

__all__ = ["WindowCache"]


class WindowCache:
    # The sinks are the batch's first slots, so a left-padded row decodes otherwise than alone: batch jobs
    # (decodekit generate --input) decode rows of one prompt length together.
    exact_when_padded = False
    # Under compile=True each layer's update and attention run as one eager call (decodekit.cache's
    # `runs_eagerly`): traced, the ring's host-side bookkeeping (`_lengths`, `_oldest`, `_turn`, `_masks`)
    # became guards that each prompt length of a batch job failed, a recompile per length up to dynamo's limit.
    runs_eagerly = True

    def __init__(self, spec: CacheSpec, params: WindowParams | None = None) -> None:
        params = WindowParams() if params is None else params
        self.spec = spec
        self.params = params
        self.sizes = layer_sizes(params, spec)
        self.sinks, self.slack = params.sinks, params.slack
        self.rings = [size + params.slack - 1 for size in self.sizes]
        self._storage = lookup_storage(params.store, "window")
        self.store = self._storage(spec, [self.sinks + ring for ring in self.rings])
        self._slots = [torch.full((self.sinks + r,), -1, dtype=torch.long, device=spec.device) for r in self.rings]
        # What the last update of each layer returned: each key's slot, and for a moved copy of a
        # sink the new query it belongs to (-1: every query may see it).
        self._returned: list[Tensor] = [self._slots[layer][:0] for layer in range(spec.n_layers)]
        self._owners: list[Tensor | None] = [None] * spec.n_layers
        # Layers of one size hold the same slots, so one forward asks them the same questions:
        # masks by size, (first slot, positions) -> mask; the sinks' rotation by its offset.
        self._masks: dict[int, tuple[int, Tensor, Tensor]] = {}
        self._turn: tuple[int, tuple[Tensor, Tensor]] | None = None
        self.reset()

    @property
    def length(self) -> int:
        return self._lengths[-1]

    @property
    def capacity(self) -> int:
        return sys.maxsize

    @property
    def nbytes(self) -> int:
        return self.store.nbytes

    @property
    def rollback(self) -> int:
        """`crop` can always take back the last `slack` slots: the ring holds them beyond the window."""
        return self.slack

    def _where(self, layer: int, slot: int) -> int:
        """The storage slot of stream slot `slot`."""
        return slot if slot < self.sinks else self.sinks + (slot - self.sinks) % self.rings[layer]

    def _write(self, layer: int, first: int, k: Tensor, v: Tensor) -> None:
        """Store tokens of slots `first ..`, in runs that do not wrap around the ring."""
        i, T = 0, k.shape[2]
        while i < T:
            slot = first + i
            where = self._where(layer, slot)
            end = self.sinks if slot < self.sinks else self.sinks + self.rings[layer]
            n = min(T - i, end - where)
            self.store.write(layer, where, k[:, :, i : i + n], v[:, :, i : i + n])
            self._slots[layer][where : where + n] = torch.arange(slot, slot + n, device=self._slots[layer].device)
            self._filled[layer] = max(self._filled[layer], where + n)
            if slot >= self.sinks:  # writing slot s evicted slot s - ring
                self._oldest[layer] = max(self._oldest[layer], slot + n - self.rings[layer])
            i += n

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        try:
            start = self._lengths[layer]
        except IndexError:  # a layer past the spec's: refused naming n_layers
            check_keys(self.spec, layer, k)
            raise
        T = k.shape[2]
        if self.slack >= T:
            # The ring keeps `size - 1 + slack` recent tokens: the first new query still finds its window.
            self._write(layer, start, k, v)
            keys, values = self.store.read(layer, 0, self._filled[layer])
            self._returned[layer] = self._slots[layer][: self._filled[layer]]
        else:
            # A long block (a prefill): attend over what is held plus the whole block, then keep its tail.
            # The block goes through a scratch storage too, so every key attended was stored once.
            scratch = self._storage(self.spec, [0] * layer + [T])  # slots on `layer` alone: its shape (layer_shapes)
            scratch.write(layer, 0, k, v)
            new_k, new_v = scratch.read(layer, 0, T)
            old_k, old_v = self.store.read(layer, 0, self._filled[layer])
            keys, values = torch.cat([old_k, new_k], 2), torch.cat([old_v, new_v], 2)
            new_slots = torch.arange(start, start + T, device=self._slots[layer].device)
            self._returned[layer] = torch.cat([self._slots[layer][: self._filled[layer]], new_slots])
            head = max(0, min(T, self.sinks - start))  # block tokens that are sinks
            if head:
                self._write(layer, start, k[:, :, :head], v[:, :, :head])
            tail = max(head, T - self.rings[layer])
            self._write(layer, start + tail, k[:, :, tail:], v[:, :, tail:])
        self._lengths[layer] = start + T
        return self._move_sinks(layer, start, T, keys, values)

    def _move_sinks(self, layer: int, start: int, T: int, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
        """Replace the held sinks by one moved copy per new query (storage is untouched)."""
        self._owners[layer] = None
        held = min(self.sinks, self._filled[layer])
        base = self.spec.rope_base
        first_delta = start - (self.sizes[layer] + self.sinks - 1)  # the move query i needs: first_delta + i
        if T == 0 or held == 0 or base is None or first_delta + T - 1 <= 0:
            return keys, values  # nothing between the sinks and any window yet: no query needs a move
        if T == 1:  # one query, one copy: rotate the sinks in place of the stored ones (values unchanged)
            if self._turn is None or self._turn[0] != first_delta:
                self._turn = (first_delta, rope_angles(torch.tensor([[first_delta]]), keys.shape[-1], base))
            moved = apply_rope(keys[:, :, :held], *self._turn[1])
            return torch.cat([moved, keys[:, :, held:]], 2), values
        delta = torch.arange(first_delta, first_delta + T).clamp(min=0)  # [T]
        shift = delta.repeat_interleave(held)  # [T * held]: copy i moved for query i
        sink_k, sink_v = keys[:, :, :held], values[:, :, :held]
        moved = rotate(sink_k.repeat(1, 1, T, 1), shift, base)
        keys = torch.cat([moved, keys[:, :, held:]], 2)
        values = torch.cat([sink_v.repeat(1, 1, T, 1), values[:, :, held:]], 2)
        slots = self._returned[layer]
        self._returned[layer] = torch.cat([slots[:held].repeat(T), slots[held:]])
        owners = torch.full((keys.shape[2],), -1, dtype=torch.long, device=slots.device)
        owners[: T * held] = torch.arange(T, device=slots.device).repeat_interleave(held)
        self._owners[layer] = owners
        return keys, values

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        T, size = positions.shape[1], self.sizes[layer]
        first = self._lengths[layer] - T
        memo = self._masks.get(size)
        if memo is not None and memo[0] == first and memo[1] is positions:
            return memo[2]
        mask = slot_mask(self._returned[layer], positions, first, window=size, sinks=self.sinks)
        owners = self._owners[layer]
        if owners is not None:  # a moved sink copy is seen by its own query only
            queries = torch.arange(T, device=owners.device)[:, None]  # [T, 1]
            mask &= ((owners < 0) | (owners == queries)).unsqueeze(0).unsqueeze(0)
        self._masks[size] = (first, positions, mask)
        return mask

    def reach(self, new: int) -> int:
        return min(self.length + new, max(self.sizes) + self.sinks)

    def reset(self) -> None:
        self._masks.clear()
        self._lengths = [0] * self.spec.n_layers
        self._filled = [0] * self.spec.n_layers  # storage slots ever written since the last reset
        # Per layer, the oldest stream slot the ring still holds (host-side: crop reads it without a sync).
        # Not `length - ring`: a crop empties ring slots whose older tokens the cropped writes had evicted.
        self._oldest = [self.sinks] * self.spec.n_layers
        for slots in self._slots:
            slots.fill_(-1)

    def oldest_crop(self) -> int:
        """The smallest `n` that `crop(n)` accepts: every layer still holds the window of slot `n`."""
        n = 0
        for size, first in zip(self.sizes, self._oldest):  # the oldest recent token held
            if first > self.sinks:  # something was evicted: the next query's window must be held
                n = max(n, first + size - 1)
        return min(n, self.length)

    def crop(self, n: int) -> None:
        low = self.oldest_crop()
        if not isinstance(n, int) or isinstance(n, bool):
            raise ParameterError(f"WindowCache.crop: n={n!r} is invalid; allowed: an int, {low} <= n <= {self.length}")
        if not low <= n <= self.length:
            raise ParameterError(
                f"WindowCache.crop: n={n} is invalid: the window has evicted tokens the query at slot {n} would "
                f"need (slack={self.slack}); allowed: {low} <= n <= {self.length}"
            )
        self._lengths = [n] * self.spec.n_layers
        self._oldest = [min(first, n) for first in self._oldest]  # nothing older than n is held past a crop below it
        self._masks.clear()
        for slots in self._slots:
            slots.masked_fill_(slots >= n, -1)  # taken back: never attended to again

    def reorder(self, index: Tensor) -> None:
        index = row_index("WindowCache", index, self.spec.batch_size)
        self.store.reorder(index, max(self._filled))

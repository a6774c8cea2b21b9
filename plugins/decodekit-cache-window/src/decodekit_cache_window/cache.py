"""`WindowCache`: the first `sinks` tokens plus the most recent `size` tokens of each layer, per row.

Layout per layer and row, in storage slots, as the row would have it alone: `[0, sinks)` the row's sinks (its
first real tokens), then a ring of `size + slack - 1` recent tokens (the row's `r`-th token, `r >= sinks`, lives
in ring slot `(r - sinks) % ring`). A left-padded row's `r`-th token is in stream slot `row start + r`; the
rows' starts come with the first forward's positions (`attention_mask`), so that forward's keys are written
once its mask is asked. Rows write their own slots (`Storage.write_at`; rows that start together, a batch without
padding, share one run of slices: faster than writing by index). Memory is fixed once the ring is full,
and an append writes one slot and reads the same number of slots at token 100,000 as at token 100.
`_slots[l]` `[B, S]` records the stream slot each storage slot holds (-1: none), which is all
`attention_mask` needs: keys come back in storage order.

Positions (StreamingLLM, Xiao et al. 2024): keys arrive rotated at their own positions and are stored that way.
Recent keys stay right (a query at `p` sees them at distances below `size`); once tokens between a row's sinks
and a query's window are gone, the sinks are moved, on the way out, to sit just before that window
(`decodekit.rope`, from the stored originals, so nothing accumulates), by the row's own distance. In a block of
several queries each query gets its own moved copy of its row's sinks (visible to it alone), so a block of any
length is attended exactly as one token at a time would be, and no query ever sees a distance of
`size + sinks` or more.

Rows roll back by different amounts (`crop_rows`, batched speculative decoding) without moving a stored token: a row
moved right by `d` slots is the same tokens with a start `d` slots later, and its slot table counted `d` further.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch import Tensor

from decodekit.cache import row_ends, row_index, slot_mask
from decodekit.errors import ParameterError
from decodekit.rope import apply_rope, rotate, turns
from decodekit.spec import CacheSpec
from decodekit.storage import SlotWritable, check_keys, lookup_storage
from decodekit_cache_window.params import WindowParams
from decodekit_cache_window.sizes import layer_sizes

__all__ = ["WindowCache"]

# A block's keys and values with room for its queries' moved sink copies in front, the slots of the keys after that
# room, the block's first slot, and where the block begins among those keys (None: it was stored before it was
# read back): `attention_mask` fills the room in once it knows each row's start.
_Copies = tuple[Tensor, Tensor, Tensor, int, int | None]


class WindowCache:
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
        # Each layer's rotary frequencies (None: its sinks never move); layers that agree share one tensor (`_turn`).
        shared: dict[object, Tensor | None] = {}
        freqs = [spec.frequencies(layer) for layer in range(spec.n_layers)]
        self._inv_freq = [shared.setdefault(None if f is None else tuple(f.tolist()), f) for f in freqs]
        self._storage = lookup_storage(params.store, "window")
        self.store = self._storage(spec, [self.sinks + ring for ring in self.rings])
        if not isinstance(self.store, SlotWritable):
            raise ParameterError(
                f"cache window: store={params.store!r} is invalid: its storage cannot write each row to slots of its "
                "own (write_at), which rows of different prompt lengths need; allowed: a storage with write_at "
                "(gqa, dense, int8)"
            )
        B, device = spec.batch_size, spec.device
        self._slots = [torch.full((B, self.sinks + r), -1, dtype=torch.long, device=device) for r in self.rings]
        # What the last update of each layer returned: each key's slot, and for a moved copy of a
        # sink the new query it belongs to (-1: every query may see it).
        self._returned: list[Tensor] = [slots[:, :0] for slots in self._slots]
        self._owners: list[Tensor | None] = [None] * spec.n_layers
        # Layers of one size hold the same slots, so one forward asks them the same questions:
        # masks by size, (first slot, positions) -> mask; the sinks' rotation by its offset and frequencies.
        self._masks: dict[int, tuple[int, Tensor, Tensor]] = {}
        self._turn: tuple[int, Tensor, tuple[Tensor, Tensor]] | None = None
        self._indices: dict[int, tuple[tuple[int, int], Tensor, Tensor]] = {}  # see `_index`
        # The first forward's block per layer, written once its mask says where each row starts (`_settle`).
        self._pending: list[tuple[Tensor, Tensor] | None] = []
        self._copies: list[_Copies | None] = []  # see `_Copies`
        self._learned: Tensor | None = None  # the positions the rows' starts were read from
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

    def _starts_at(self, starts: list[int]) -> None:
        """Each row's first real slot (its padding before it), kept host-side too: read without a sync."""
        self._starts = starts
        self._row_start = torch.tensor(starts, dtype=torch.long, device=self.spec.device)
        self._first_start, self._last_start = min(starts), max(starts)
        self._turn = None
        self._masks.clear()
        self._indices.clear()

    def _write(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        """Store the tokens of stream slots `start ..`, each row's in its own slots, `ring` at a time: a later
        token overwrites an earlier one, as a ring does."""
        ring, T = self.rings[layer], k.shape[2]
        if self._first_start == self._last_start:  # every row starts together: one run of slots for all
            self._write_runs(layer, start, k, v)
            return
        for i in range(0, T, ring):
            index, held = self._index(ring, start + i, min(ring, T - i))
            n = index.shape[1]
            where = index[:, None].expand(-1, k.shape[1], -1)  # [B, H_kv, n]
            self.store.write_at(layer, where, k[:, :, i : i + n], v[:, :, i : i + n])  # type: ignore[attr-defined]  # checked at construction
            self._slots[layer].scatter_(1, index, held)

    def _write_runs(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        """`_write` where every row starts at the same slot (a batch without padding, the common case): slices, in
        runs that do not wrap around the ring, which is faster than writing each row by index."""
        i, T, ring, sinks = 0, k.shape[2], self.rings[layer], self.sinks
        while i < T:
            slot = start + i
            r = slot - self._first_start
            where, end = (r, sinks) if r < sinks else (sinks + (r - sinks) % ring, sinks + ring)
            n = min(T - i, end - where)
            self.store.write(layer, where, k[:, :, i : i + n], v[:, :, i : i + n])
            self._slots[layer][:, where : where + n] = torch.arange(slot, slot + n, device=self._row_start.device)
            i += n

    def _index(self, ring: int, first: int, n: int) -> tuple[Tensor, Tensor]:
        """Where stream slots `first .. first + n - 1` (n <= ring) go in each row's storage `[B, n]` (its `r`-th token:
        sink `r`, else ring slot `(r - sinks) % ring`), and the slot each then holds: padding lands in slots its row's
        tokens overwrite, held by none (-1). Every layer of a ring's size asks the same: made once."""
        memo = self._indices.get(ring)
        if memo is None or memo[0] != (first, n):
            t = torch.arange(first, first + n, device=self._row_start.device)[None]  # [1, n]
            r = t - self._row_start[:, None]  # [B, n]: each row's own count of tokens before
            index = torch.where((r >= 0) & (r < self.sinks), r, self.sinks + (r - self.sinks) % ring)
            memo = self._indices[ring] = ((first, n), index, torch.where(r >= 0, t, -1))
        return memo[1], memo[2]

    def _settle(self, layer: int) -> None:
        """Write the first forward's block of `layer`, kept until the rows' starts were known."""
        pending = self._pending[layer]
        if pending is not None:
            self._pending[layer] = None
            self._write(layer, 0, *pending)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        try:
            start = self._lengths[layer]
        except IndexError:  # a layer past the spec's: refused naming n_layers
            check_keys(self.spec, layer, k)
            raise
        self._settle(layer)  # its mask was never asked: every row starts at slot 0
        T, filled, ring = k.shape[2], self._filled[layer], self.rings[layer]
        self._lengths[layer] = start + T
        self._filled[layer] = max(filled, min(self.sinks + ring, start + T))  # storage slots ever written
        if start + T > ring:  # slots of the stream before `start + T - ring` are overwritten in every row's ring
            self._oldest[layer] = [max(first, start + T - ring) for first in self._oldest[layer]]
        self._owners[layer], self._copies[layer] = None, None
        short = start > 0 and start >= self._last_start and self.slack >= T
        if short:
            # A short block of real tokens: the ring keeps `size - 1 + slack` recent ones, so the first new query
            # still finds its window.
            self._write(layer, start, k, v)
            keys, values = self.store.read(layer, 0, self._filled[layer])
            self._returned[layer] = self._slots[layer][:, : self._filled[layer]]
            if T == 1:
                return self._move_in_place(layer, start, keys), values
        else:
            # A long block (a prefill), the first (the rows' starts are not known yet) or one with padding:
            # attended over what is held plus the whole block (a padding query sees itself), then stored.
            # The block goes through a scratch storage too, so every key attended was stored once.
            scratch = self._storage(self.spec, [0] * layer + [T])  # slots on `layer` alone: its shape (layer_shapes)
            scratch.write(layer, 0, k, v)
            new_k, new_v = scratch.read(layer, 0, T)
            old_k, old_v = self.store.read(layer, 0, filled)
            keys, values = torch.cat([old_k, new_k], 2), torch.cat([old_v, new_v], 2)
            new_slots = torch.arange(start, start + T, device=k.device).expand(self.spec.batch_size, T)
            self._returned[layer] = torch.cat([self._slots[layer][:, :filled], new_slots], 1)
            if start == 0:
                self._pending[layer] = (k, v)
            else:
                self._write(layer, start, k, v)
        if not self._moves(layer, start, T):
            return keys, values
        # Room for one moved copy of the sinks per query, filled by `attention_mask`: the rows' starts, which say
        # where each row's sinks are and how far they move, come with the positions. NaN until then, so a model
        # that attends before asking the mask fails loudly (NumericsError) rather than attending to zeros.
        B, _, S, _ = keys.shape
        keys, values = (
            torch.cat([x.new_full((B, x.shape[1], T * self.sinks, x.shape[3]), torch.nan), x], 2)
            for x in (keys, values)
        )
        self._copies[layer] = (keys, values, self._returned[layer], start, None if short else S - T)
        return keys, values

    def _moves(self, layer: int, start: int, T: int) -> bool:  # noqa: N803
        """Whether a query of this block sees sinks moved: one past the window and the sinks, of the row of the
        earliest start (before the first mask: a row without padding)."""
        reach_back = self.sizes[layer] + self.sinks - 1
        return (
            T > 0
            and self.sinks > 0
            and self._inv_freq[layer] is not None
            and start + T - 1 - self._first_start > reach_back
        )

    def _shift(self, layer: int, start: int, T: int) -> Tensor:  # noqa: N803
        """`[B, T]`: how far query `i` of each row moves its row's sinks (0 while they are its own positions)."""
        queries = torch.arange(start, start + T, device=self._row_start.device)[None] - self._row_start[:, None]
        return (queries - (self.sizes[layer] + self.sinks - 1)).clamp(min=0)

    def _move_in_place(self, layer: int, start: int, keys: Tensor) -> Tensor:
        """One query: each row's sinks (storage slots `[0, sinks)`) rotated in place of the stored ones."""
        if not self._moves(layer, start, 1):
            return keys
        held, inv_freq = min(self.sinks, self._filled[layer]), self._inv_freq[layer]
        assert inv_freq is not None  # `_moves`
        turn = self._turn  # layers of one size and frequencies share it
        offset = start - self.sizes[layer]
        if turn is None or turn[0] != offset or turn[1] is not inv_freq:
            turn = self._turn = (offset, inv_freq, turns(self._shift(layer, start, 1)[:, None], inv_freq))
        moved = apply_rope(keys[:, :, :held], *turn[2])
        return torch.cat([moved, keys[:, :, held:]], 2)

    def _fill_copies(self, layer: int) -> None:
        """Fill the room in front of the block's keys with one moved copy of each row's sinks per query, taken from
        where they are (storage slots `[0, sinks)`, or the block itself); the sinks behind are hidden."""
        keys, values, held, start, block = self._copies[layer]  # type: ignore[misc]  # set by update
        self._copies[layer] = None
        sinks, room = self.sinks, keys.shape[2] - held.shape[1]
        T = room // sinks
        j = torch.arange(sinks, device=held.device)
        own = self._row_start[:, None] + j  # [B, sinks]: each row's sinks' stream slots
        source = j.expand_as(own)  # in storage slots [0, sinks) once stored
        if block is not None:  # the block was not stored before it was attended: its sinks are in it
            source = torch.where(own >= start, block + own - start, source)
        source = source.clamp(max=held.shape[1] - 1)
        slots = held.gather(1, source)
        slots = torch.where(slots == own, slots, -1)  # a sink not fed yet (or taken back) is seen by none
        for x in (keys, values):
            index = source[:, None, :, None].expand(-1, x.shape[1], -1, x.shape[3])
            x[:, :, :room] = x[:, :, room:].gather(2, index).repeat(1, 1, T, 1)
        shift = self._shift(layer, start, T).repeat_interleave(sinks, 1)  # [B, T * sinks]: copy i*sinks+j of query i
        keys[:, :, :room] = rotate(keys[:, :, :room], shift[:, None], self._inv_freq[layer])  # type: ignore[arg-type]  # `_moves`
        is_sink = (held >= self._row_start[:, None]) & (held < self._row_start[:, None] + sinks)
        self._returned[layer] = torch.cat([slots.repeat(1, T), held.masked_fill(is_sink, -1)], 1)
        owners = torch.full((keys.shape[2],), -1, dtype=torch.long, device=held.device)
        owners[:room] = torch.arange(T, device=held.device).repeat_interleave(sinks)
        self._owners[layer] = owners

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        T, size = positions.shape[1], self.sizes[layer]
        first = self._lengths[layer] - T
        if first == 0 < T and positions is not self._learned:  # the first forward: each row's start, once
            self._learned = positions
            self._starts_at((-positions[:, 0]).tolist())
        self._settle(layer)
        if self._copies[layer] is not None:
            self._fill_copies(layer)
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
        L, B = self.spec.n_layers, self.spec.batch_size
        self._lengths = [0] * L
        self._filled = [0] * L  # storage slots ever written since the last reset
        # Per layer and row, the oldest stream slot its ring may still hold (host-side: crop reads it without a sync);
        # the row has evicted once it is past the row's sinks. Not `length - ring`: a crop empties ring slots whose
        # older tokens the cropped writes had evicted. Per row: `crop_rows` moves rows by different amounts.
        self._oldest = [[0] * B for _ in range(L)]
        self._pending, self._copies, self._learned = [None] * L, [None] * L, None
        self._starts_at([0] * B)
        for slots in self._slots:
            slots.fill_(-1)

    def _floors(self) -> list[int]:
        """Per row, the smallest slot whose query's window every layer still holds (0 while the row evicted none)."""
        floors = [0] * self.spec.batch_size
        for size, oldest in zip(self.sizes, self._oldest):
            for b, first in enumerate(oldest):
                if first > self._starts[b] + self.sinks:  # the row evicted: the next query's window must be held
                    floors[b] = max(floors[b], first + size - 1)
        return floors

    def oldest_crop(self) -> int:
        """The smallest `n` that `crop(n)` accepts: every layer still holds every row's window of slot `n`."""
        return min(max(self._floors()), self.length)

    def crop(self, n: int) -> None:
        low = self.oldest_crop()
        if not isinstance(n, int) or isinstance(n, bool):
            raise ParameterError(f"WindowCache.crop: n={n!r} is invalid; allowed: an int, {low} <= n <= {self.length}")
        if not low <= n <= self.length:
            raise ParameterError(
                f"WindowCache.crop: n={n} is invalid: the window has evicted tokens the query at slot {n} would "
                f"need (slack={self.slack}); allowed: {low} <= n <= {self.length}"
            )
        for layer in range(self.spec.n_layers):
            self._settle(layer)
        self._lengths = [n] * self.spec.n_layers
        # nothing older than n is held past a crop below it
        self._oldest = [[min(first, n) for first in oldest] for oldest in self._oldest]
        self._masks.clear()
        for slots in self._slots:
            slots.masked_fill_(slots >= n, -1)  # taken back: never attended to again

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        """Row `b` keeps its slots before `ends[b]`, moved `length - ends[b]` slots right: no stored token moves, the
        row starts that much later. A row whose window of slot `ends[b]` was evicted is refused, naming the range;
        a row that keeps none of its tokens (`ends[b]` within its padding) starts afresh at `length`."""
        ends = row_ends("WindowCache", ends, length, self.length, self.spec.batch_size)
        for layer in range(self.spec.n_layers):
            self._settle(layer)
        # Each row's tokens it keeps; a row fed only junk at its last position in a first forward (left out of a
        # speculative round) has a start before slot 0, and nothing to keep.
        kept = [max(end - max(start, 0), 0) for end, start in zip(ends, self._starts)]
        self._check_rows(ends, length, kept)
        shifts = [length - end for end in ends]
        self._oldest = [[min(first, e) + d for first, e, d in zip(oldest, ends, shifts)] for oldest in self._oldest]
        device = self._row_start.device
        end_t, shift_t = (torch.tensor(x, device=device)[:, None] for x in (ends, shifts))
        self._slots = [torch.where((slots >= 0) & (slots < end_t), slots + shift_t, -1) for slots in self._slots]
        self._lengths = [length] * self.spec.n_layers
        self._starts_at([length - n for n in kept])

    def _check_rows(self, ends: list[int], length: int, kept: list[int]) -> None:
        """Refuse a row that keeps more tokens than `length` slots hold, or whose next query's window was evicted."""
        n, floors = self.length, self._floors()
        for b, (end, count, start) in enumerate(zip(ends, kept, self._starts)):
            if count > length:
                raise ParameterError(
                    f"WindowCache.crop_rows: ends={ends}, length={length} are invalid: row {b} keeps its {count} "
                    f"tokens (slots {start}..{end - 1}), more than {length} slots hold; allowed: length >= {count}"
                )
            if count > 0 and end < min(floors[b], n):
                raise ParameterError(
                    f"WindowCache.crop_rows: ends[{b}]={end} is invalid: the window has evicted tokens row {b}'s query "
                    f"at slot {end} would need (slack={self.slack}); allowed: {min(floors[b], n)} <= ends[{b}] <= {n}, "
                    f"or ends[{b}] <= {start} (the row keeps none of its tokens)"
                )

    def reorder(self, index: Tensor) -> None:
        index = row_index("WindowCache", index, self.spec.batch_size)
        for layer in range(self.spec.n_layers):
            self._settle(layer)
        self.store.reorder(index, max(self._filled))
        rows = index.tolist()
        self._oldest = [[oldest[i] for i in rows] for oldest in self._oldest]
        index = index.to(self._row_start.device)
        self._slots = [slots.index_select(0, index) for slots in self._slots]
        self._starts_at([self._starts[i] for i in rows])

"""One layer's bookkeeping in a scored cache, and the record of recent forwards that `crop` replays.

Storage slot `s` of row `b`, kv-head `h` holds stream slot `slots[b, h, s]` (-1: never written); it is
attended while `alive`, ranked by `score`, and once evicted it stays untouched (`freed_at`: the length
at eviction) until no crop can bring it back. A forward of a few tokens records where it wrote them and
the state before (`Forward`); a long block (a prompt) is compressed as a whole and clears the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from decodekit_cache_scored.selection import NEVER

__all__ = ["Block", "Forward", "LayerState", "Step"]


@dataclass
class Forward:
    """A short forward: its first slot, where its tokens went (`index` `[B, H, T]`), their first scores, the
    layer's state before them, and (after observe) each query's contributions `[B, H, T, S]`."""

    start: int
    alive: Tensor
    score: Tensor
    freed_at: Tensor
    index: Tensor
    initial: Tensor
    contributions: Tensor | None = None


@dataclass
class Block:
    """A long block, compressed before the next forward writes: the held keys and values (views of the
    storage) and the block's, every entry's stream slot, score and liveness (held entries first), and once
    observed what its attention weights are made from when it is compressed (`ScoredCache._block_weights`):
    the keys it attended `[B, H_s, S + T', D]`, its queries `[B, n_heads, T, D]`, mask `[B, n_heads, T, S + T']`
    and real queries `[B, 1, T, 1]` (T' >= T: the block before a crop cut it)."""

    start: int
    keys: list[Tensor]
    values: list[Tensor]
    slots: Tensor  # [B, H, S + T]
    score: Tensor  # [B, H, S + T]
    alive: Tensor  # [B, H, S + T]
    attention: tuple[Tensor, Tensor, Tensor, Tensor] | None = None

    def cut(self, n: int, held: int) -> None:
        """Keep the block's tokens before stream slot `n` (`held`: entries before the block's)."""
        m = n - self.start
        self.keys, self.values = [self.keys[0], self.keys[1][:, :, :m]], [self.values[0], self.values[1][:, :, :m]]
        self.slots, self.score, self.alive = (x[..., : held + m] for x in (self.slots, self.score, self.alive))
        if self.attention is not None:
            keys, queries, mask, valid = self.attention
            self.attention = (keys, queries[:, :, :m], mask[:, :, :m], valid[:, :, :m])

    def align(self, kept: list[int], held: int) -> None:
        """Keep row `b`'s first `kept[b]` tokens of the block, moved right so that every row's end at column
        `max(kept)` (`held`: entries before the block's): a row's columns before its tokens are padding (dead,
        their queries score nothing), so its last tokens and queries are the block's last, as a block cut alone."""
        width = max(kept)
        shift = torch.tensor([width - m for m in kept], device=self.slots.device)[:, None]  # [B, 1]
        self.keys[1], self.values[1] = (_aligned(x, 2, 0, shift) for x in (self.keys[1], self.values[1]))
        self.score, self.alive = _aligned(self.score, 2, held, shift), _aligned(self.alive, 2, held, shift, False)
        if self.attention is not None:
            keys, queries, mask, valid = self.attention
            mask = _aligned(_aligned(mask, 2, 0, shift), 3, held, shift, False)  # no query sees a padding key
            queries, valid = _aligned(queries, 2, 0, shift), _aligned(valid, 2, 0, shift, False)
            self.attention = (_aligned(keys, 2, held, shift), queries, mask, valid)
        self.cut(self.start + width, held)


@dataclass
class Step:
    """A short forward's compression, free slots and masks, decided at its first layer for every layer of one shape
    at once (`layers`; each depends only on a layer's state before the forward, recorded in `before`); per layer,
    views of `[L, ...]` tensors (L: those layers)."""

    start: int
    new: int  # tokens fed
    layers: list[int]  # the layers planned, of one shape (kv-heads, head_dim)
    before: dict[int, tuple[Tensor, Tensor, Tensor, Tensor]]  # each layer's (slots, alive, score, freed_at) used
    held: int | None  # alive entries after the compression (None: nothing compressed)
    alive: dict[int, Tensor]  # [B, H, S] after the compression
    freed_at: dict[int, Tensor]  # [B, H, S] after the compression
    index: dict[int, Tensor]  # [B, H, T] where the new tokens go
    slots: dict[int, Tensor]  # [B, H, S] after the write
    written: dict[int, Tensor]  # [B, H, S] alive after the write
    key_slots: dict[int, Tensor]  # [B, H, S] of the returned keys (-1: none)
    stacked_keys: Tensor  # [L, B, H, S]: `key_slots` as one tensor
    initial: dict[int, Tensor] | None  # [B, H, T] the new tokens' scores, when they need no keys (`Policy.at`)
    score: dict[int, Tensor] | None  # [B, H, S] after the write (with `initial`)
    whole: dict[str, Tensor]  # the `[L, ...]` tensors of slots, written, freed_at and score: the next step's
    masks: tuple[object, dict[int, Tensor], Tensor] | None = None  # (`_queries`' memo, its masks, stacked)


@dataclass
class LayerState:
    slots: Tensor  # [B, H, S] stream slot held (-1: none)
    alive: Tensor  # [B, H, S] bool
    score: Tensor  # [B, H, S] float32
    freed_at: Tensor  # [B, H, S] length at eviction (NEVER: none)
    length: int = 0
    held: int = 0  # alive entries at most (host-side: compress only when it can matter)
    journal: list[Forward] = field(default_factory=list)
    pending: Block | None = None
    observed: bool = True  # the last update's queries were observed
    key_slots: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))  # of the returned keys
    keys: Tensor = field(default_factory=lambda: torch.empty(0))  # returned by the last update
    mask: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.bool))  # [B, n_heads, T, S']
    valid: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.bool))  # [B, T] real queries

    @classmethod
    def empty(cls, batch: int, heads: int, slots: int, device: torch.device | str) -> LayerState:
        shape = (batch, heads, slots)
        return cls(
            slots=torch.full(shape, -1, dtype=torch.long, device=device),
            alive=torch.zeros(shape, dtype=torch.bool, device=device),
            score=torch.zeros(shape, device=device),
            freed_at=torch.full(shape, NEVER, dtype=torch.long, device=device),
        )

    def snapshot(self, start: int, index: Tensor, initial: Tensor) -> Forward:
        """The state before a forward that writes to `index` with scores `initial` (no copy: the state is only
        ever replaced, never written in place)."""
        return Forward(start, self.alive, self.score, self.freed_at, index, initial)

    def restore(self, forward: Forward, n: int, apply: object) -> None:
        """The state after feeding `forward`'s tokens before stream slot `n` (as one forward), from its record.

        apply: the policy's `apply(score, contributions)`, to replay the kept queries' contributions.
        """
        m = n - forward.start
        self.alive, self.score = _restored(forward, m, apply)
        self.freed_at = forward.freed_at
        if forward.contributions is not None and m > 0:
            forward.contributions = forward.contributions[:, :, :m]
        forward.index, forward.initial = forward.index[..., :m], forward.initial[..., :m]
        self.journal = self.journal[: self.journal.index(forward) + (1 if m > 0 else 0)]
        self.length, self.observed, self.held = n, True, 1 << 62  # held unknown: the next update compresses

    def restore_rows(self, ends: list[int], length: int, empty: list[bool], apply: object) -> None:
        """Row `b` as `restore` leaves it at stream slot `ends[b]` (nothing held where `empty[b]`), its stream slots
        then moved `length - ends[b]` on: rows that share a record and a cut are restored together. The record
        starts afresh: its forwards' slots are no longer one count for every row."""
        B = len(ends)
        shift = torch.tensor([length - n for n in ends], device=self.alive.device)[:, None, None]
        self.slots = torch.where(self.slots >= 0, self.slots + shift, -1)
        if self.pending is not None:
            self._restore_block(ends, length, empty, shift)
            return
        alive, score, freed_at = self.alive, self.score, self.freed_at
        groups: dict[tuple[int, int], list[int]] = {}
        for b, n in enumerate(ends):
            if not empty[b] and n < self.length:  # a row that keeps every slot keeps its state
                at = next(i for i in reversed(range(len(self.journal))) if self.journal[i].start <= n)
                groups.setdefault((at, n - self.journal[at].start), []).append(b)
        device = alive.device
        for (i, m), rows in groups.items():
            forward = self.journal[i]
            row = torch.zeros(B, 1, 1, dtype=torch.bool, device=device)
            row[rows] = True
            restored = _restored(forward, m, apply)
            alive, score = torch.where(row, restored[0], alive), torch.where(row, restored[1], score)
            freed_at = torch.where(row, forward.freed_at, freed_at)
        none = torch.tensor(empty, device=device)[:, None, None]
        self.alive, self.score = alive & ~none, score.masked_fill(none, 0.0)
        self.freed_at = torch.where(none | (freed_at == NEVER), NEVER, freed_at + shift)
        self.journal, self.length, self.observed, self.held = [], length, True, 1 << 62

    def _restore_block(self, ends: list[int], length: int, empty: list[bool], shift: Tensor) -> None:
        """`restore_rows` of a long block not compressed yet: each row's tokens of it kept and aligned (`Block.align`),
        the entries held before it moved with their row."""
        block, held = self.pending, self.slots.shape[-1]
        assert block is not None
        block.align([0 if none else n - block.start for n, none in zip(ends, empty)], held)
        width = block.slots.shape[-1] - held
        block.start = length - width
        new = torch.arange(block.start, length, device=shift.device).expand(*self.slots.shape[:2], width)
        none = torch.tensor(empty, device=shift.device)[:, None, None]
        block.slots = torch.cat([self.slots, new], -1)
        block.alive = torch.cat([block.alive[..., :held] & ~none, block.alive[..., held:]], -1)
        self.length, self.observed = length, True

    def reorder(self, index: Tensor) -> None:
        """Row `i` becomes row `index[i]`, the record of recent forwards too (so `crop` still takes them back)."""
        for name in ("slots", "alive", "score", "freed_at"):
            setattr(self, name, getattr(self, name).index_select(0, index))
        for forward in self.journal:
            for name in ("alive", "score", "freed_at", "index", "initial", "contributions"):
                x = getattr(forward, name)
                if x is not None:
                    setattr(forward, name, x.index_select(0, index))


def _restored(forward: Forward, m: int, apply: object) -> tuple[Tensor, Tensor]:
    """`(alive, score)` after the first `m` tokens of `forward`, from its record (`apply`: the policy's, to replay
    the kept queries' contributions)."""
    index = forward.index[..., :m]
    alive = forward.alive.scatter(-1, index, True)
    score = forward.score.scatter(-1, index, forward.initial[..., :m])
    if forward.contributions is not None and m > 0:
        score = apply(score, forward.contributions[:, :, :m])  # type: ignore[operator]
    return alive, score


def _aligned(x: Tensor, dim: int, offset: int, shift: Tensor, fill: bool | None = None) -> Tensor:
    """`x` with its columns along `dim` from `offset` on moved `shift[b]` `[B, 1]` on in row `b` (dim 0); the columns
    a row's move empties hold `fill` (None: any value)."""
    n = x.shape[dim] - offset
    old = torch.arange(n, device=x.device)[None] - shift  # [B, n]: the old column of each
    shape = [1] * x.dim()
    shape[0], shape[dim] = old.shape
    size = list(x.shape)
    size[dim] = n
    moved = x.gather(dim, (old.clamp(min=0) + offset).view(shape).expand(size))
    if fill is not None:
        moved = moved.masked_fill((old < 0).view(shape), fill)
    return torch.cat([x.narrow(dim, 0, offset), moved], dim)

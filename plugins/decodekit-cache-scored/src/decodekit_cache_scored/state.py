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
        index = forward.index[..., :m]
        self.alive = forward.alive.scatter(-1, index, True)
        self.score = forward.score.scatter(-1, index, forward.initial[..., :m])
        self.freed_at = forward.freed_at
        if forward.contributions is not None and m > 0:
            forward.contributions = forward.contributions[:, :, :m]
            self.score = apply(self.score, forward.contributions)  # type: ignore[operator]
        forward.index, forward.initial = index, forward.initial[..., :m]
        self.journal = self.journal[: self.journal.index(forward) + (1 if m > 0 else 0)]
        self.length, self.observed, self.held = n, True, 1 << 62  # held unknown: the next update compresses

    def reorder(self, index: Tensor) -> None:
        """Row `i` becomes row `index[i]`, the record of recent forwards too (so `crop` still takes them back)."""
        for name in ("slots", "alive", "score", "freed_at"):
            setattr(self, name, getattr(self, name).index_select(0, index))
        for forward in self.journal:
            for name in ("alive", "score", "freed_at", "index", "initial", "contributions"):
                x = getattr(forward, name)
                if x is not None:
                    setattr(forward, name, x.index_select(0, index))

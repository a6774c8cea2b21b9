"""Tensor rules of the scored caches, each `[B, H, S]` over storage slots (one row and kv-head per `[b, h]`):
which entries to keep, where new ones go, and how far a kept key is moved past the model's context."""

from __future__ import annotations

import torch
from torch import Tensor

from decodekit.rope import rotate

__all__ = ["NEVER", "capped_shift", "free_slots", "keep_top", "rotate_each", "slot_order"]

NEVER = -(2**62)  # `freed_at` of a storage slot that never held an evicted entry


def keep_top(priority: Tensor, alive: Tensor, slots: Tensor, budget: int) -> Tensor:
    """`[B, H, S]` bool: the `budget` alive entries of highest priority; on a tie the newer (higher slot) wins."""
    by_slot = torch.argsort(slots, dim=-1, descending=True)  # the dead rank last below, whatever their slot
    ranked = torch.where(alive, priority, float("-inf")).gather(-1, by_slot)
    order = by_slot.gather(-1, torch.argsort(ranked, dim=-1, descending=True, stable=True))
    keep = torch.zeros_like(alive).scatter_(-1, order[..., :budget], True)
    return keep & alive


def free_slots(alive: Tensor, freed_at: Tensor, before: int, n: int, lowest_first: Tensor) -> Tensor:
    """`[B, H, n]`: the `n` lowest storage slots holding nothing alive, freed at or before `before` (so that
    an entry evicted since then is still there for `crop` to bring back). `lowest_first`: `S - arange(S)`."""
    return torch.topk(lowest_first.masked_fill(alive | (freed_at > before), 0), n, dim=-1).indices


def slot_order(slots: Tensor, alive: Tensor) -> Tensor:
    """`[B, H, S]`: the entries' indices in stream-slot order, the alive ones first (the rest keep their order)."""
    return torch.argsort(torch.where(alive, slots, torch.iinfo(slots.dtype).max), dim=-1, stable=True)


def capped_shift(slots: Tensor, held: Tensor, last: int, context: int) -> Tensor:
    """`[B, H, S]`: positions to move each held key forward so that the query in slot `last` sees it within
    the context: keys stay at their own distance unless the oldest held one is `context` or more back; then
    the `j`-th oldest is seen at most `context - 1 - j` back (distances stay distinct and in order)."""
    S = slots.shape[-1]
    order = slot_order(slots, held)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(S, device=slots.device).expand_as(order))
    distance = last - slots
    capped = torch.minimum(distance, context - 1 - rank)
    oldest = torch.where(held, distance, -1).amax(-1, keepdim=True)
    return torch.where(held & (oldest > context - 1), distance - capped, 0)


def rotate_each(keys: Tensor, shift: Tensor, inv_freq: Tensor) -> Tensor:
    """`keys` `[B, H', S, D]` (rotated at their positions), each moved `shift` `[B, H, S]` positions on (H' a
    multiple of H: a storage that repeats kv-heads) by `decodekit.rope.rotate`. Rotations compose, so the stored
    key is never changed."""
    return rotate(keys, shift.repeat_interleave(keys.shape[1] // shift.shape[1], dim=1), inv_freq)

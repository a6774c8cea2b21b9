"""A prompt's copies prefilled once: rows that repeat a prompt (`n` samples, beams, a prompt given twice) are computed
as one row, each written to the cache rows of all its copies (docs/concepts.md, "The decode engine")."""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch
from torch import Tensor

from decodekit.cache import KVCache

__all__ = ["CopiesView", "distinct_rows"]


def distinct_rows(tokens: Tensor, positions: Tensor) -> tuple[Tensor, Tensor] | None:
    """(the first row of each distinct prompt, each row's index among them), or None when every row is distinct.
    Rows are alike when their tokens and positions are: the same prompt with the same padding."""
    if tokens.shape[0] < 2:
        return None
    rows = torch.cat([tokens, positions.to(tokens.dtype)], dim=1)
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
    if unique.shape[0] == rows.shape[0]:
        return None
    first = torch.full((unique.shape[0],), rows.shape[0], dtype=torch.long, device=rows.device)
    first.scatter_reduce_(0, inverse, torch.arange(rows.shape[0], device=rows.device), reduce="amin")
    first, order = first.sort()  # in row order, not the tokens': copies side by side make a slice (`_evenly_spaced`)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device)
    return first, rank[inverse]


class CopiesView:
    """The cache `kv` as a model sees it in the prefill of distinct rows (`first`, `inverse`: what `distinct_rows`
    returns): `update` writes each distinct row's keys and values to every copy's row and hands back the distinct
    rows' (views of what `kv` returned where the distinct rows are evenly spaced), `attention_mask` the distinct rows'
    mask (one that broadcasts over rows as it is). Its `spec` is the cache's with the distinct rows' `batch_size`, and
    its `observe` (where the cache has one) hands each copy's row its prompt's queries; everything else (`length`,
    `reach`, ...) is the cache's own, and a member the cache lacks is absent here too."""

    def __init__(self, kv: KVCache, first: Tensor, inverse: Tensor) -> None:
        self.kv, self.first, self.inverse = kv, _evenly_spaced(first), inverse
        self.spec = dataclasses.replace(kv.spec, batch_size=len(first))
        # Per layer, until its mask is asked: what `update` returned for every row, and ours, held weakly (a cache
        # that completes its keys later holds them; a model that attends later holds ours).
        self._returned: dict[int, tuple[weakref.ref[Tensor], ...]] = {}
        self._positions: tuple[Tensor, Tensor] | None = None

    @property
    def length(self) -> int:
        return self.kv.length

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = self.kv.update(layer, k[self.inverse], v[self.inverse])
        if isinstance(self.first, slice):  # views: what the cache completes in place later is ours too
            return keys[self.first], values[self.first]
        ours = keys[self.first], values[self.first]
        self._returned[layer] = tuple(weakref.ref(x) for x in (keys, values, *ours))
        return ours

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        # A cache may complete what `update` returned here (window's moved sinks): ours, gathered, follow. Held
        # before the cache's call, which may drop its own hold.
        keys, values, ours_k, ours_v = (ref() for ref in self._returned.pop(layer, (_dead,) * 4))
        mask = self.kv.attention_mask(layer, self._every_row(positions))
        if keys is not None and values is not None and ours_k is not None and ours_v is not None:
            ours_k.copy_(keys[self.first])
            ours_v.copy_(values[self.first])
        return mask[self.first] if mask.shape[0] == len(self.inverse) else mask  # a mask may broadcast over rows

    def _every_row(self, positions: Tensor) -> Tensor:
        """`positions` of every row, the same tensor for the same given one (a cache may memoize by identity)."""
        if self._positions is None or self._positions[0] is not positions:
            self._positions = (positions, positions[self.inverse])
        return self._positions[1]

    def __getattr__(self, name: str) -> Any:
        if name == "kv":  # not set yet: copy and pickle probe an instance before they fill it
            raise AttributeError(name)
        found = getattr(self.kv, name)  # an AttributeError keeps a capability the cache lacks absent here too
        if name == "observe":  # a scoring cache scores each copy's row by its queries
            return lambda layer, queries: found(layer, queries[self.inverse])
        return found


def _evenly_spaced(first: Tensor) -> Tensor | slice:
    """`first` as a slice where its rows are evenly spaced (each prompt's copies side by side, as the engine lays out
    samples and beams): the view then hands out views of what the cache returns, neither copied nor re-copied."""
    rows = first.tolist()
    step = rows[1] - rows[0] if len(rows) > 1 else 1  # ascending: `distinct_rows` sorts them
    evenly = slice(rows[0], rows[-1] + 1, step)
    return evenly if rows == list(range(evenly.start, evenly.stop, step)) else first


def _dead() -> None:
    """A weak reference whose tensor is gone: a layer with nothing to complete."""

"""`TopP`: nucleus truncation (Holtzman et al. 2020) without sorting the vocabulary when it can.

Rule, on the tokens sorted by logit: token i is dropped when the probability of the tokens
before it already reaches p (`cum[i-1] >= p`). So the token that crosses p stays, the most
probable token always stays, and the kept tokens are a prefix: every logit >= the last
kept one (its ties included). At least `min_keep` tokens (and their ties) are kept.

The nucleus lies in the K most probable tokens when the cut falls among them and the
(K+1)-th logit is below the last kept one (no tie reaches past them). Partial top-k's of
64, 512 and 4,096 tokens are tried first (the core's grid search,
`decodekit.candidates.top_candidates`, where it pays); the vocabulary is sorted only when
none holds every row's nucleus. Deciding so reads a few values back from the device per try.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.candidates import top_candidates
from decodekit.stage import Candidates, Constants, ProcessorBase
from decodekit_top_p.params import TopPParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TopP", "last_kept"]

_PREFIXES = (64, 512, 4096)  # partial sorts tried before sorting the whole vocabulary


def last_kept(cum: Tensor, target: Tensor, min_keep: int) -> Tensor:
    """Position `[B, 1]` of the last token the nucleus keeps, from the sorted cumulative mass `cum`
    `[B, K]` and `target` `[B, 1]`, p times the row's total mass.

    Token i stays while the mass before it, `cum[i-1]`, is < target: the last one kept is the
    first whose own `cum[i]` reaches it, at the position that counts the `cum` entries below it.
    Searching the first K-1 entries lands in [0, K-1] without a clamp (for one row that slice is
    contiguous; for several rows a clamp is cheaper than the copy searchsorted would make).
    """
    head = cum[:, :-1]
    if min_keep == 1 and head.is_contiguous():
        return torch.searchsorted(head, target)
    return torch.searchsorted(cum, target).clamp(min=min_keep - 1, max=cum.shape[1] - 1)


_REMOVED = Constants(float("-inf"))


def _keep(values: Tensor, floor: Tensor) -> Tensor:
    # NaN is never below floor: it stays visible. (where and > rather than masked_fill and <: the
    # kernels repetition_penalty runs too, already warm in a chain's step.)
    (removed,) = _REMOVED.like(values)
    return torch.where(floor > values, removed, values)


class TopP(ProcessorBase[TopPParams]):
    """Keep the smallest most-probable prefix whose probability reaches p; `p = 1` is a no-op."""

    name = "top_p"
    params_model = TopPParams

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if self.params.p >= 1.0:
            return logits
        _, _, floor = self._nucleus(logits)
        return _keep(logits, floor)

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        """The nucleus as candidates; None when p = 1 (nothing is removed)."""
        if self.params.p >= 1.0:
            return None
        values, ids, floor = self._nucleus(logits)
        if values.shape[1] == logits.shape[1]:  # the vocabulary was sorted: cut the -inf tail
            count = max(int((values >= floor).sum(-1).amax()), 1)  # host sync
            values, ids = values[:, :count], ids[:, :count]
        return Candidates(_keep(values, floor), ids)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        if self.params.p >= 1.0:
            return c
        # Unnormalised mass, exp(logit - row max), against p times its total rather than a softmax:
        # the kernels `sample` runs next, so a decode step has one kernel less to load into the caches.
        v = c.values if c.values.dtype in (torch.float32, torch.float64) else c.values.float()
        cum = (v - v[:, :1]).exp_().cumsum_(-1)  # [B, K]: candidates are sorted, the first is the maximum
        (p,) = self._p.like(cum)
        floor = c.values.gather(1, last_kept(cum, cum[:, -1:] * p, self.params.min_keep))
        return Candidates(_keep(c.values, floor), c.indices)

    @cached_property
    def _p(self) -> Constants:
        return Constants(self.params.p)

    def _nucleus(self, logits: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """`(values, ids, floor)`: a sorted prefix `[B, K]` holding every row's nucleus, and its last kept logit."""
        p, min_keep = self.params.p, self.params.min_keep
        probs = logits.softmax(-1, dtype=torch.float32)  # [B, V]
        target = probs.new_full((probs.shape[0], 1), p)
        for size in _PREFIXES:
            if size * 2 > logits.shape[1] or size < min_keep:
                break
            values, ids = top_candidates(logits, size + 1)  # the prefix, and the largest logit past it
            values, ids = values[:, : size + 1], ids[:, : size + 1]  # (ties past it are checked below)
            cum = probs.gather(1, ids).cumsum_(-1)  # [B, size+1] mass of the most probable tokens
            last = last_kept(cum, target, min_keep)
            floor = values.gather(1, last)
            # known when the cut falls within the prefix and the logit past it is below the floor
            if bool(((last < size) & (floor > values[:, size:])).all()):  # host sync
                return values, ids, floor
        values, ids = logits.sort(-1, descending=True)
        cum = probs.gather(1, ids).cumsum_(-1)
        return values, ids, values.gather(1, last_kept(cum, target, min_keep))

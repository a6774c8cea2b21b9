"""`TopK`: keep the k largest logits of each row; every tie at the k-th value is kept too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from decodekit.candidates import keep_at_least, top_candidates
from decodekit.stage import Candidates, ProcessorBase
from decodekit_top_k.params import TopKParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TIE_ROOM", "TopK"]

TIE_ROOM = 8
"""Tokens tied with the k-th largest beyond the k that a candidate set holds."""


class TopK(ProcessorBase[TopKParams]):
    """`x_i` if `x_i >= x_(k)` (the row's k-th largest logit) else -inf; `k >= V` is a no-op."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        k = self.params.k
        if k >= logits.shape[-1]:
            return logits
        kth = logits.topk(k).values[:, -1:]  # [B, 1]
        # NaN is never < kth: it stays visible. A row of fewer than k finite logits has kth -inf: nothing is below it,
        # so the row passes as it is, its finite logits kept and its -inf ones -inf.
        return logits.masked_fill(logits < kth, float("-inf"))

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        """The kept tokens, with room for `TIE_ROOM` ties at the k-th value; None when k >= V."""
        k = self.params.k
        if k >= logits.shape[-1]:
            return None
        c, bound = top_candidates(logits, k + TIE_ROOM)
        floor = c.values[:, k - 1 : k]
        # Not held (redone densely): more ties, a NaN, or fewer than k finite logits (-inf > -inf is False).
        return keep_at_least(c, floor, floor > bound)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        k = self.params.k
        if k >= c.values.shape[-1]:
            return c
        kth = c.values[:, k - 1 : k]  # candidates are sorted: the k-th largest of each row
        return Candidates(c.values.masked_fill(c.values < kth, float("-inf")), c.indices)

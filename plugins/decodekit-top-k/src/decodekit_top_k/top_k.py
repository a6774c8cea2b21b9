"""`TopK`: keep the k largest logits of each row; every tie at the k-th value is kept too."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.candidates import keep_at_least, top_candidates
from decodekit.stage import Candidates, ProcessorBase
from decodekit_top_k.params import TopKParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TIE_ROOM", "TopK"]

TIE_ROOM = 8
"""Tokens tied with the k-th largest beyond the k that a candidate set holds."""


def _floor(kth: Tensor) -> Tensor:
    """The smallest logit kept: the k-th largest, or the smallest finite value in a row with fewer
    than k finite logits (which keeps just those). NaN stays NaN."""
    return kth.clamp(min=torch.finfo(kth.dtype).min)


class TopK(ProcessorBase[TopKParams]):
    """`x_i` if `x_i >= x_(k)` (the row's k-th largest logit) else -inf; `k >= V` is a no-op."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        k = self.params.k
        if k >= logits.shape[-1]:
            return logits
        kth = _floor(logits.topk(k).values[:, -1:])  # [B, 1]
        return logits.masked_fill(logits < kth, float("-inf"))  # NaN is never < kth: it stays visible

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

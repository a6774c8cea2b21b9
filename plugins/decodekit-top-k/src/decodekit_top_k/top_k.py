"""`TopK`: keep the k largest logits of each row; every tie at the k-th value is kept too."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor

from decodekit.candidates import top_candidates, top_candidates_after
from decodekit.stage import Candidates, ProcessorBase
from decodekit_top_k.params import TopKParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TopK"]


class TopK(ProcessorBase[TopKParams]):
    """`x_i` if `x_i >= x_(k)` (the row's k-th largest logit) else -inf; `k >= V` is a no-op."""

    name = "top_k"
    params_model = TopKParams

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        k = self.params.k
        if k >= logits.shape[-1]:
            return logits
        kth = logits.topk(k).values[:, -1:]  # [B, 1]
        return logits.masked_fill(logits < kth, float("-inf"))  # NaN is never < kth: it stays visible

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        """The kept tokens as candidates (one host sync, see `top_candidates`); None when k >= V."""
        if self.params.k >= logits.shape[-1]:
            return None
        return top_candidates(logits, self.params.k)

    def to_candidates_after(
        self, logits: Tensor, f: Callable[[Tensor], Tensor], ctx: DecodeContext
    ) -> Candidates | None:
        """Its candidates on `f(logits)` for a monotone map `f` (temperature), f applied to the kept tokens only."""
        if self.params.k >= logits.shape[-1]:
            return None
        return top_candidates_after(logits, self.params.k, f)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        k = self.params.k
        if k >= c.values.shape[-1]:
            return c
        kth = c.values[:, k - 1 : k]  # candidates are sorted: the k-th largest of each row
        return Candidates(c.values.masked_fill(c.values < kth, float("-inf")), c.indices)

"""The core's `sample` selector: an exact categorical draw, one uniform per row, no host sync."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.params import NoParams
from decodekit.stage import Candidates, SelectorBase

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Sample", "inverse_cdf"]


# u < 1 is at most 1 - 2**-24 in float32; scaled by this, u · total rounds strictly below
# total, so the search always lands on a token whose CDF step is non-empty.
_BELOW_ONE = 1.0 - 2.0**-23


def _search(cdf: Tensor, u: Tensor) -> Tensor:
    """Index `[B]` of the first CDF entry above `u · total`, for `cdf` `[B, K]` and `u` `[B]` in [0, 1)."""
    if u.dtype != cdf.dtype:
        u = u.to(cdf.dtype)
    target = (u * _BELOW_ONE).unsqueeze_(1).mul_(cdf[:, -1:])
    # A NaN or all -inf row (flagged by the chain) would search past the end: stay in range.
    return torch.searchsorted(cdf, target, right=True).squeeze_(1).clamp_(max=cdf.shape[1] - 1)


def inverse_cdf(logits: Tensor, u: Tensor) -> Tensor:
    """Index `[B]` drawn from softmax(`logits` `[B, V]`) by inverting the CDF at `u` `[B]` in [0, 1).

    One uniform per row instead of one random number per vocabulary entry
    (`torch.multinomial`, the exponential race): on a 50,257-token row this costs
    about three softmaxes. Tokens at -inf have zero width in the CDF, so they are never drawn.
    """
    cdf = (logits - logits.amax(-1, keepdim=True)).exp_().cumsum_(-1)  # unnormalised
    return _search(cdf, u)


class Sample(SelectorBase[NoParams]):
    """Categorical draw from softmax(logits), from each row's own generator."""

    name = "sample"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return inverse_cdf(logits, ctx.uniform())

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        # Walk the candidates in vocabulary order, as the dense call walks the vocabulary:
        # the same uniform then picks the same token on either path.
        indices, order = c.indices.sort(-1)
        values = c.values.gather(1, order)
        cdf = values.sub_(c.values[:, :1]).exp_().cumsum_(-1)  # candidates are sorted: column 0 is the max
        return indices.gather(1, _search(cdf, ctx.uniform()).unsqueeze_(1)).squeeze_(1)

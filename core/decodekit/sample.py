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


def inverse_cdf(logits: Tensor, u: Tensor) -> Tensor:
    """Index `[B]` drawn from softmax(`logits` `[B, V]`) by inverting the CDF at `u` `[B]` in [0, 1).

    One uniform per row instead of one random number per vocabulary entry
    (`torch.multinomial`, the exponential race): on a 50,257-token row this costs
    about three softmaxes. Tokens at -inf have zero width in the CDF, so they are never drawn.
    """
    weights = (logits - logits.amax(-1, keepdim=True)).exp_()  # unnormalised probabilities
    cdf = weights.cumsum_(-1)
    total = cdf[:, -1:]
    # u * total can round up to total; stay strictly below it so the search lands on a token
    # whose CDF step is non-empty.
    x = torch.minimum(u.to(cdf.dtype)[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x, right=True).squeeze(1)


class Sample(SelectorBase[NoParams]):
    """Categorical draw from softmax(logits), from each row's own generator."""

    name = "sample"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return inverse_cdf(logits, ctx.uniform())

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        # Walk the candidates in vocabulary order, as the dense call walks the vocabulary:
        # the same uniform then picks the same token on either path.
        indices, order = c.indices.sort(-1)
        picked = inverse_cdf(c.values.gather(1, order), ctx.uniform())
        return indices.gather(1, picked[:, None]).squeeze(1)

"""The core's `sample` selector: an exact categorical draw by inverting the CDF, one uniform per row."""

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
    """Position `[B]` drawn from softmax(`logits` `[B, K]`): the first whose CDF exceeds `u` `[B]` in [0, 1).

    Summed in float32 (float64 when given). Tokens at -inf have zero width, so they are never
    drawn. On a row that cannot be sampled (NaN, +inf, none finite) the position is meaningless
    but in range; the chain marks such rows.
    """
    x = logits if logits.dtype == torch.float64 else logits.float()
    cdf = (x - x.amax(-1, keepdim=True)).exp().cumsum(-1)
    total = cdf[:, -1:]
    # Strictly below the total, though u · total may round up to it: the first entry above the
    # target then has a non-empty step of the CDF, never a removed token's.
    target = torch.minimum(u.to(cdf.dtype).view(-1, 1) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).clamp(max=x.shape[-1] - 1).view(-1)


class Sample(SelectorBase[NoParams]):
    """Categorical draw from softmax(logits), from each row's own generator."""

    name = "sample"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return inverse_cdf(logits, ctx.uniform())

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        # The candidates in vocabulary order, as the dense call walks the vocabulary: the same
        # uniform then picks the same token on either path.
        indices, order = c.indices.sort(-1)
        return indices.gather(1, inverse_cdf(c.values.gather(1, order), ctx.uniform())[:, None]).view(-1)

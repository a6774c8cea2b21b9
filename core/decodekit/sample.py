"""The core's `sample` selector: an exact categorical draw by inverting the CDF, one uniform per row."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.params import NoParams
from decodekit.stage import Candidates, SelectorBase

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Sample", "inverse_cdf", "sorted_position"]

_BELOW_ONE = 1.0 - 2.0**-23
# exp(z) as 2**(z·log2 e): on x86 CPUs aten's exp takes a slow path for -inf and z below about -87, which every
# truncated row and a low temperature give (4-90x at [8, 50257]; exp2 stays fast: docs/benchmarks.md)
_LOG2_E = 1.4426950408889634


def sorted_position(cum: Tensor, target: Tensor, *, right: bool = False) -> Tensor:
    """`torch.searchsorted(cum, target, right=right)` for rows `cum` `[B, K]` sorted ascending, `target` `[B, 1]`;
    under compile a count (`cum < target`, summed), which inductor fuses into the kernels around it."""
    if torch.compiler.is_compiling():
        return (cum <= target if right else cum < target).sum(-1, keepdim=True)
    return torch.searchsorted(cum, target, right=right)


def inverse_cdf(logits: Tensor, u: Tensor) -> Tensor:
    """Position `[B, 1]` drawn from softmax(`logits` `[B, K]`): the first whose CDF exceeds `u` `[B, 1]`
    in [0, 1) times the total, summed in float32 at least. A -inf token has zero width, never drawn;
    on a row that cannot be sampled (NaN, +inf, none finite) the position is in range but meaningless."""
    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    cdf = (x - x.amax(-1, keepdim=True)).mul_(_LOG2_E).exp2_().cumsum(-1)  # the max adds 2**0: the total is >= 1
    # u < 1 - 2**-24; scaled by 1 - 2**-23 its product with a total >= 1 rounds strictly below the
    # total, so the first entry above it has a non-empty step of the CDF, never a removed token's.
    target = cdf[:, -1:] * (u * _BELOW_ONE)
    return sorted_position(cdf, target, right=True).clamp_(max=x.shape[-1] - 1)


class Sample(SelectorBase[NoParams]):
    """Categorical draw from softmax(logits), from each row's own generator."""

    distribution = "softmax"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return inverse_cdf(logits, ctx.uniform(keepdim=True)).view(-1)

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        # In vocabulary order, as the dense call walks it: the same uniform picks the same token.
        indices, order = c.indices.sort(-1)
        pos = inverse_cdf(c.values.gather(1, order), ctx.uniform(keepdim=True))
        return indices.gather(1, pos).view(-1)

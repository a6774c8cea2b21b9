"""The core's `sample` selector: an exact categorical draw, one uniform per row, no host sync."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.params import NoParams
from decodekit.stage import Candidates, Constants, SelectorBase

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Sample", "inverse_cdf"]


# A float32 u < 1 is at most 1 - 2**-24, and then u · total rounds strictly below any total
# >= 1 (the CDF's total is: its maximum contributes exp(0) = 1), so the search always lands
# on a token whose CDF step is non-empty. `inverse_cdf` scales a caller's u by this first,
# which keeps even u = 1 in range.
_BELOW_ONE = 1.0 - 2.0**-23


_BELOW_ANY_TARGET = Constants(-1.0)  # every target but NaN is above it
_UNSAMPLEABLE = Constants(-1)  # the token id of a row that cannot be sampled


def _cdf(shifted: Tensor) -> Tensor:
    """Unnormalised CDF, in place, of logits already shifted by their row maximum (float32 at least)."""
    return shifted.exp_().cumsum_(-1)


def _draw(cdf: Tensor, u: Tensor, ids: Tensor | None = None) -> Tensor:
    """Per row `[B]`, the first position of `cdf` `[B, K]` above `u · total` (its token id in `ids` when given).

    `u` `[B, 1]` holds float32 draws in [0, 1). A row whose total is
    NaN (a NaN logit, +inf, or no finite logit: see `inverse_cdf`) cannot be sampled and gets -1.
    """
    if u.dtype != cdf.dtype:
        u = u.to(cdf.dtype)
    target = u * cdf[:, -1:]
    # Searching all but the last entry lands in [0, K-1] (a NaN target on K-1) with no clamp;
    # that slice is contiguous for one row, and for several rows the clamp is cheaper than a copy.
    head = cdf[:, :-1]
    if head.is_contiguous():
        pos = torch.searchsorted(head, target, right=True)
    else:
        pos = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[1] - 1)
    tokens = pos if ids is None else ids.gather(1, pos)
    # target >= 0 unless NaN. (where and > rather than isnan and masked_fill: kernels a chain's
    # processors run too, so they are warm when the selector runs.)
    (below,) = _BELOW_ANY_TARGET.like(target)
    (unsampleable,) = _UNSAMPLEABLE.like(tokens)
    return torch.where(target > below, tokens, unsampleable).view(-1)


def _working(logits: Tensor) -> Tensor:
    """The logits in the precision the CDF is summed in: float32, or float64 when given."""
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def inverse_cdf(logits: Tensor, u: Tensor) -> Tensor:
    """Index `[B]` drawn from softmax(`logits` `[B, V]`) by inverting the CDF at `u` `[B]` in [0, 1).

    One uniform per row instead of one random number per vocabulary entry
    (`torch.multinomial`, the exponential race): on a 50,257-token row this costs
    about three softmaxes. Tokens at -inf have zero width in the CDF, so they are never drawn.
    Half-precision logits are summed in float32. A row that cannot be sampled gets -1: a NaN
    logit, a +inf one, or none finite (after the shift by the row's maximum, its total is NaN).
    """
    logits = _working(logits)
    cdf = _cdf(logits - logits.amax(-1, keepdim=True))
    return _draw(cdf, (u.float() * _BELOW_ONE).view(-1, 1))


class Sample(SelectorBase[NoParams]):
    """Categorical draw from softmax(logits), from each row's own generator; -1 for a row that cannot be sampled."""

    name = "sample"
    marks_unsampleable = True
    distribution = "softmax"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        logits = _working(logits)
        return _draw(_cdf(logits - logits.amax(-1, keepdim=True)), ctx.uniform(keepdim=True))

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        # Walk the candidates in vocabulary order, as the dense call walks the vocabulary:
        # the same uniform then picks the same token on either path. (Ordered by a `topk` of
        # all K smallest rather than `sort`: the same result for distinct ids, and in a decode
        # step, where the model's forward has just evicted every kernel's code from the caches,
        # a few microseconds less: `top_k` has just run the float one.)
        indices, order = c.indices.topk(c.indices.shape[1], largest=False)
        values = _working(c.values)
        cdf = _cdf(values.gather(1, order) - values[:, :1])  # candidates are sorted: column 0 is the max
        return _draw(cdf, ctx.uniform(keepdim=True), indices)

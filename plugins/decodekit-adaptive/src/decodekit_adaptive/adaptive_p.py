"""Adaptive-p (llama.cpp `llama_sampler_adaptive_p_apply`, PR 17927, `--samplers ...;adaptive_p`): a selector
that reshapes the distribution around a target probability and steers the sampled tokens' average probability
towards it. A selector with per-row state.

Each step, per row, with p the softmax of the logits it is given (a removed token has p = 0):
  1. the adapted target a = clamp(2 * target - ema, 0, 1): below the target when recent tokens ran above it;
  2. each token not removed gets the logit 5 - 10 d^2 / (1 + d), d = |p - a| / 0.3 (quadratic near the target,
     linear in the tails); a removed token stays removed;
  3. sample from their softmax, with the row's own generator (inverse CDF, one uniform);
  4. ema <- decay * ema + (1 - decay) * p of the sampled token (its probability before step 2).
ema starts at `target`. llama.cpp keeps ema as the ratio of two sums (sum p_i decay^i over sum decay^i, both
started at their fixed point): the same number. A negative target is llama.cpp's "off": plain sampling, as
`sample` draws it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.sample import inverse_cdf
from decodekit.stage import SelectorBase
from decodekit_adaptive.params import AdaptivePParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["AdaptiveP", "reshaped_logits"]

WIDTH, PEAK, SHARPNESS = 0.3, 5.0, 10.0  # llama.cpp's DISTRIBUTION_WIDTH, PEAK_LOGIT_VALUE, SHARPNESS


def reshaped_logits(x: Tensor, p: Tensor, adapted: Tensor) -> Tensor:
    """Step 2: logits `[B, V]` peaked at the probability `adapted` `[B, 1]`; -inf where `x` is -inf."""
    d = (p - adapted).abs_().div_(WIDTH)
    shaped = d.square().div_(d.add_(1.0)).mul_(-SHARPNESS).add_(PEAK)  # in place: a few passes over [B, V]
    return shaped.masked_fill_(x == -torch.inf, -torch.inf)


class AdaptiveP(SelectorBase[AdaptivePParams]):
    """Sample tokens near an adapted target probability, steering their average probability towards `target`."""

    def init_state(self, ctx: DecodeContext) -> Tensor:
        """The moving average of the sampled tokens' probabilities `[B]`, one per row, starting at `target`."""
        start = max(self.params.target, 0.0)  # off (negative) never reads it, and -1e300 is no float32
        return torch.full((ctx.batch_size,), start, device=ctx.tokens.device)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        ema: Tensor = ctx.state_for(self)  # [B], updated in place below
        x = logits if logits.dtype == torch.float64 else logits.float()
        target = self.params.target
        if target < 0:  # llama.cpp's off: the distribution as it is
            return inverse_cdf(x, ctx.uniform(keepdim=True)).view(-1)
        p = x.softmax(-1)
        adapted = (2 * min(target, 1.0) - ema.to(p.device, p.dtype)).clamp_(0.0, 1.0)[:, None]
        tokens = inverse_cdf(reshaped_logits(x, p, adapted), ctx.uniform(keepdim=True))
        picked = p.gather(-1, tokens).squeeze(-1).to(ema.device, ema.dtype)
        decay = self.params.decay
        # a row that cannot be sampled (NaN; the chain reports it) keeps its average
        ema.copy_(torch.where(torch.isfinite(picked), decay * ema + (1 - decay) * picked, ema))
        return tokens.view(-1)

"""Dynamic (entropy-scaled) temperature, exactly llama.cpp's `temp_ext` (`llama_sampler_temp_ext_apply`).

With delta > 0 and n > 1 candidate tokens (finite logits):
    H_norm = min(1, H(softmax(x)) / log(n))                 (entropy over its maximum)
    T      = low + (high - low) * H_norm ** exponent,       low = max(0, temp - delta), high = temp + delta
    x     -> x / T        (T <= 0: only the argmax survives)
A flat distribution is sampled hot, a peaked one cold. With delta = 0 it is a plain
temperature (temp = 0: only the argmax survives); with one candidate it changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_adaptive.params import DynamicTemperatureParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["DynamicTemperature"]

NEG_INF = float("-inf")
_GREEDY_BELOW = 1e-5


def keep_argmax(x: Tensor) -> Tensor:
    """`x` with every entry but each row's first maximum at -inf (temperature 0)."""
    keep = torch.zeros_like(x, dtype=torch.bool).scatter_(-1, x.argmax(-1, keepdim=True), True)
    return x.masked_fill(~keep, NEG_INF)


class DynamicTemperature(ProcessorBase[DynamicTemperatureParams]):
    """Divide the logits by a temperature that grows with the distribution's normalised entropy."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        prm = self.params
        x = logits if logits.dtype == torch.float64 else logits.float()
        if prm.delta == 0:
            temp = torch.full_like(x[:, :1], prm.temp)
        else:
            low, high = max(0.0, prm.temp - prm.delta), prm.temp + prm.delta
            n = (x > NEG_INF).sum(-1, keepdim=True)  # [B, 1] candidates
            logp = x.log_softmax(-1)
            entropy = -(logp.exp() * logp).nansum(-1, keepdim=True)  # 0 * -inf terms of removed tokens skipped
            # H_norm is in [0, 1], but rounding can put a flat row just above 1, and 1.0000001 ** 1e10 is
            # inf (removed tokens would become -inf / inf = NaN): clamp it, so T stays in [low, high].
            h_norm = (entropy / n.clamp(min=2).log()).clamp(0.0, 1.0)
            temp = low + (high - low) * h_norm.pow(prm.exponent)  # [B, 1]
            temp = torch.where(n > 1, temp, 1.0)  # a single candidate is left alone
        # As `temperature`: a quotient above the range saturates, and below 1e-5 only the argmax survives.
        out = (x / temp).clamp_(max=torch.finfo(logits.dtype).max)  # the range of the dtype returned
        return torch.where(temp >= _GREEDY_BELOW, out, keep_argmax(x)).to(logits.dtype)

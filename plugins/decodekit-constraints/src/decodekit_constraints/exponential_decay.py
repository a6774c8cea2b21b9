"""Exponential decay length penalty (HF `ExponentialDecayLengthPenalty`, `exponential_decay_length_penalty`).

Past `start` generated tokens the stop tokens' logits grow, so a row ends ever likelier, with no hard cut:
x += |x| · (factor^(step - start) - 1) while step > start (the |x| keeps the push upwards for a negative x).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_constraints.params import ExponentialDecayParams
from decodekit_constraints.sequences import check_token_ids

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["ExponentialDecay"]


def _growth(factor: float, steps: int) -> float:
    """factor**steps - 1 as HF computes it (a Python float), inf where that overflows."""
    try:
        return float(factor**steps) - 1.0
    except OverflowError:
        return float("inf")


class ExponentialDecay(ProcessorBase[ExponentialDecayParams]):
    """Raise the stop tokens' logits by |x| · (factor^(step - start) - 1) once `start` tokens are generated."""

    def __init__(self, params: ExponentialDecayParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._ids = torch.tensor(sorted(set(self.params.stop_tokens)), dtype=torch.long)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        check_token_ids(self.name, "stop_tokens", max(self.params.stop_tokens), logits.shape[-1])  # no read of _ids
        steps = ctx.step - self.params.start
        if steps <= 0:
            return logits
        ids = self._ids.to(logits.device)
        x = logits[:, ids]
        # Unlike HF, a logit of 0 (or -inf) stays (HF: 0 * inf = NaN once the growth overflows), and a sum
        # past the dtype's range saturates at its largest value (HF: +inf, whose softmax is NaN).
        pushed = (x + x.abs() * _growth(self.params.factor, steps)).clamp_(max=torch.finfo(x.dtype).max)
        out = logits.clone()
        out[:, ids] = torch.where((x == 0) | torch.isneginf(x), x, pushed)
        return out

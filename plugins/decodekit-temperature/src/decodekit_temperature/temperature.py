"""`Temperature`: logits / T; T = 0 keeps only the argmax (the lowest token id among equal maxima)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.candidates import first_max
from decodekit.stage import Candidates, ProcessorBase
from decodekit_temperature.params import GREEDY_BELOW, TemperatureParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Temperature"]


def _divide(x: Tensor, t: float) -> Tensor:
    """`x / t`; for t < 1 a quotient above the dtype's range saturates at its largest value (below
    it, it becomes -inf: a token removed by rounding, as exp of it is 0)."""
    return x / t if t >= 1.0 else (x / t).clamp_(max=torch.finfo(x.dtype).max)


class Temperature(ProcessorBase[TemperatureParams]):
    """`x / T`; below `GREEDY_BELOW` (T = 0 included) only the argmax keeps its logit."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        T = self.params.value
        if T == 1.0:
            return logits
        if T < GREEDY_BELOW:
            top = logits.argmax(-1, keepdim=True)  # [B, 1] the first maximum (NaN counts as one)
            return torch.full_like(logits, float("-inf")).scatter_(1, top, logits.gather(1, top))
        return _divide(logits, T)

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        """Greedy: the argmax as a one-token candidate set; None otherwise (the division is dense)."""
        if self.params.value >= GREEDY_BELOW:
            return None
        top = logits.argmax(-1, keepdim=True)
        return Candidates(logits.gather(1, top), top)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        T = self.params.value
        if T == 1.0:
            return c
        if T < GREEDY_BELOW:
            pos = first_max(c)
            return Candidates(c.values.gather(1, pos), c.indices.gather(1, pos))
        return Candidates(_divide(c.values, T), c.indices)  # dividing by T > 0 keeps the order

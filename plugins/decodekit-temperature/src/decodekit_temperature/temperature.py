"""`Temperature`: logits / T; T = 0 keeps only the argmax (the lowest token id among equal maxima)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import Candidates, Constants, ProcessorBase
from decodekit_temperature.params import TemperatureParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Temperature", "first_max"]


def first_max(c: Candidates) -> Tensor:
    """Per row `[B, 1]`, the position in `c` of the largest value with the lowest token id.

    Candidates are sorted by value, but ties among the maxima may come in any token order.
    A NaN row has no value equal to its maximum; it gets position 0, where its NaN is.
    """
    top = c.values[:, :1]
    ids = torch.where(c.values == top, c.indices, torch.iinfo(c.indices.dtype).max)
    pos = ids.argmin(-1, keepdim=True)
    return torch.where(c.values.gather(1, pos) == top, pos, 0)


class Temperature(ProcessorBase[TemperatureParams]):
    """`x / T` for T > 0; for T = 0 only the argmax keeps its logit, the rest become -inf."""

    name = "temperature"
    params_model = TemperatureParams

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        T = self.params.value
        if T == 1.0:
            return logits
        if T == 0.0:
            top = logits.argmax(-1, keepdim=True)  # [B, 1] the first maximum (NaN counts as one)
            return torch.full_like(logits, float("-inf")).scatter_(1, top, logits.gather(1, top))
        return self._divide(logits)

    def process_(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        """The call's result written into `logits` (see `decodekit.stage`)."""
        T = self.params.value
        if T == 1.0:
            return logits
        if T == 0.0:
            return logits.copy_(self(logits, ctx))
        return logits.div_(self._temperature.like(logits)[0])

    def monotone_map(self, ctx: DecodeContext) -> Callable[[Tensor], Tensor] | None:
        """`x / T` for 0 < T != 1, which a following top_k may apply to its kept tokens only (see `decodekit.stage`)."""
        T = self.params.value
        if T == 0.0 or T == 1.0:
            return None
        return self._divide  # the very operation of the call

    @cached_property
    def _temperature(self) -> Constants:
        return Constants(self.params.value)

    def _divide(self, x: Tensor) -> Tensor:
        """`x / T`."""
        return x / self._temperature.like(x)[0]

    def to_candidates(self, logits: Tensor, ctx: DecodeContext) -> Candidates | None:
        """For T = 0, the argmax as a one-token candidate set; None otherwise (the division is dense)."""
        if self.params.value != 0.0:
            return None
        top = logits.argmax(-1, keepdim=True)
        return Candidates(logits.gather(1, top), top)

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        T = self.params.value
        if T == 1.0:
            return c
        if T == 0.0:
            pos = first_max(c)
            return Candidates(c.values.gather(1, pos), c.indices.gather(1, pos))
        return Candidates(self._divide(c.values), c.indices)  # dividing by T > 0 keeps the order

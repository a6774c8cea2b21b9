"""`Greedy`: argmax, the lowest token id among equal maxima."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from decodekit.candidates import first_max
from decodekit.params import NoParams
from decodekit.stage import Candidates, SelectorBase

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Greedy"]


class Greedy(SelectorBase[NoParams]):
    """The token with the largest logit; the lowest token id on ties. Draws no random numbers."""

    distribution = "argmax"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return logits.argmax(-1)

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        return c.indices.gather(1, first_max(c)).view(-1)

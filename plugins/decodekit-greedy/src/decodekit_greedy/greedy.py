"""`Greedy`: argmax, the lowest token id among equal maxima."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.params import NoParams
from decodekit.stage import Candidates, SelectorBase

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Greedy", "first_argmax"]

_CHUNK = 1024  # tokens per chunk of the two-level search


def first_argmax(logits: Tensor) -> Tensor:
    """`logits.argmax(-1)` `[B]` (the first maximum; NaN counts as maximal), in two levels.

    On a CPU `argmax` over a 50,257-token row is a scalar loop (~45 µs) while `amax` is
    vectorised (~4 µs): take the maximum of each chunk of 1,024 tokens, the first chunk
    holding the row's maximum (`argmax` over ~50 values), then the first maximum inside it.
    The first chunk with the maximum holds its first occurrence, so ties resolve as argmax does.
    """
    B, V = logits.shape
    if V < 4 * _CHUNK or not logits.is_contiguous():
        return logits.argmax(-1)
    R = V // _CHUNK
    grid = logits.as_strided((B, R, _CHUNK), (V, _CHUNK, 1))  # the first R·C tokens, as chunks
    chunk_max = grid.amax(-1)  # [B, R]
    if R * _CHUNK < V:
        chunk_max = torch.cat([chunk_max, logits[:, R * _CHUNK :].amax(-1, keepdim=True)], 1)
    first = chunk_max.argmax(-1, keepdim=True)  # [B, 1] the first chunk holding the maximum
    # Token ids of that chunk; past the end of the row they repeat the last id, which can only
    # be found after the real occurrence.
    ids = (first * _CHUNK + torch.arange(_CHUNK, device=logits.device)).clamp_(max=V - 1)  # [B, C]
    return ids.gather(1, logits.gather(1, ids).argmax(-1, keepdim=True)).squeeze_(1)


class Greedy(SelectorBase[NoParams]):
    """The token with the largest logit; the lowest token id on ties. Draws no random numbers."""

    name = "greedy"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        return first_argmax(logits)

    def select_candidates(self, c: Candidates, ctx: DecodeContext) -> Tensor:
        """Among the candidates equal to the row's maximum, the lowest token id."""
        top = c.values[:, :1]  # candidates are sorted; ties among maxima come in any token order
        ids = torch.where(c.values == top, c.indices, torch.iinfo(c.indices.dtype).max).amin(-1)
        return torch.where(torch.isnan(top[:, 0]), c.indices[:, 0], ids)  # NaN equals nothing

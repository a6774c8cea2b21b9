"""Gumbel-max sampling: argmax(logits + G), G ~ Gumbel(0, 1) i.i.d. per token.

The argmax of Gumbel-perturbed logits is distributed exactly as softmax(logits), so this
selector is distribution-equal to `sample`. G = -log(E) with E ~ Exp(1) drawn from each row's
own generator, which makes this the exponential race argmax(p / E). It costs one random
number per vocabulary entry, by definition. There is no candidate fast path: it would draw
fewer numbers than the dense call and so could not pick the same token from the same seeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import SelectorBase
from decodekit_adaptive.params import GumbelParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Gumbel", "gumbel_noise"]


def gumbel_noise(shape: torch.Size, ctx: DecodeContext, device: torch.device) -> Tensor:
    """Gumbel(0, 1) noise `[B, N]`, row b drawn from `ctx.generators[b]` (the global generator if None)."""
    e = torch.empty(shape, device=device)
    if ctx.generators is None:
        e.exponential_()
    else:
        for b, g in enumerate(ctx.generators):
            e[b].exponential_(generator=g)
    # E = 0 would give G = +inf, and -inf + inf = NaN on a removed token: keep E > 0.
    return e.clamp_(min=torch.finfo(e.dtype).tiny).log_().neg_()


class Gumbel(SelectorBase[GumbelParams]):
    """Pick argmax(logits + Gumbel noise): a categorical draw from softmax(logits)."""

    name = "gumbel"
    params_model = GumbelParams

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        x = logits.float()
        return (x + gumbel_noise(x.shape, ctx, x.device)).argmax(-1)

"""Gumbel-max sampling: argmax(logits + G), G ~ Gumbel(0, 1) i.i.d. per token.

The argmax of Gumbel-perturbed logits is distributed exactly as softmax(logits), so this
selector is distribution-equal to `sample`. With G = -log(E), E ~ Exp(1), the argmax is the
exponential race argmax(p / E); here E = -log(U), U uniform in [0, 1) from each row's own
generator, so the pick is argmin(p / log U) (log U <= 0: one log and one division over the
row, no negation). U = 0 gives log U = -inf and a quotient of -0, which never wins; a removed
token (p = 0) gives 0 or -0, which never wins either. It costs one random number per
vocabulary entry, by definition (on a CPU, drawing 50,257 of them costs several softmaxes).
There is no candidate fast path: it would draw fewer numbers than the dense call and so could
not pick the same token from the same seeds.

Under `compile=True` the draws run eagerly, one graph break a step: a row's generator cannot be traced, and
traced the draw split the step into four graphs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.compiling import eager
from decodekit.stage import SelectorBase
from decodekit_adaptive.params import GumbelParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Gumbel", "uniforms"]


def uniforms(shape: torch.Size, ctx: DecodeContext, device: torch.device) -> Tensor:
    """Uniform [0, 1) draws `[B, N]` in float32, row b from `ctx.generators[b]` (the global generator if None).

    Column 0 is `ctx.uniform()`: a compiled step has drawn it ahead (`DecodeContext.draw_uniforms`),
    so the rest must follow it in the row's stream for eager and compiled steps to pick alike.
    """
    u = torch.empty(shape, device=device)
    u[:, 0] = ctx.uniform().to(device)
    if ctx.generators is None:
        u[:, 1:].uniform_()
        return u
    for b, g in enumerate(ctx.generators):
        u[b, 1:].uniform_(generator=g)
    return u


_uniforms = eager(uniforms)  # one break a compiled step: the per-row generators are host objects


class Gumbel(SelectorBase[GumbelParams]):
    """Pick argmax(logits + Gumbel noise): a categorical draw from softmax(logits)."""

    distribution = "softmax"  # argmax(logits + Gumbel noise) is a draw from softmax(logits)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        x = logits if logits.dtype == torch.float64 else logits.float()  # float64 beyond float32's range
        p = x.softmax(-1)  # the race is scale-free: normalised or not, the same winner
        u = _uniforms(p.shape, ctx, p.device)  # drawn before `p.div_` is named: a break after would leave it eager
        return p.div_(u.log_().to(p.dtype)).argmin(-1)

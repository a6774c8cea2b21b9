"""What both Mirostats do after truncating: draw from the kept tokens, then steer mu by the surprise."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["draw_kept", "steer"]


def draw_kept(p: Tensor, kept: Tensor, ctx: DecodeContext) -> tuple[Tensor, Tensor]:
    """Draw from `kept` `[B, V]` (p where kept, 0 elsewhere; overwritten), renormalised: tokens `[B, 1]` and the
    surprise in bits of each one's renormalised probability `[B]`.

    Inverse CDF at one uniform per row from the row's generator (as decodekit.sample.inverse_cdf): removed
    tokens have zero width and are never drawn."""
    cdf = kept.cumsum_(-1)
    mass = cdf[:, -1:]  # [B, 1] probability kept
    u = ctx.uniform().to(p.device)[:, None]
    target = torch.minimum(u * mass, torch.nextafter(mass, torch.zeros_like(mass)))
    tokens = torch.searchsorted(cdf, target, right=True).clamp_(max=p.shape[-1] - 1)  # NaN rows land past the end
    return tokens, -torch.log2(p.gather(-1, tokens) / mass).squeeze(-1)


def steer(mu: Tensor, surprise: Tensor, tau: float, eta: float) -> None:
    """mu <- mu - eta * (surprise - tau), in place; a row that cannot be sampled (the chain reports it) keeps its mu."""
    step = eta * (surprise.to(mu.device, mu.dtype) - tau)
    mu.sub_(torch.where(torch.isfinite(step), step, 0.0))

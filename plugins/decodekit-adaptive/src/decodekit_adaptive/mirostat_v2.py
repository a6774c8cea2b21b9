"""Mirostat v2 (Basu et al. 2021, "Mirostat: a neural text decoding algorithm that directly controls
perplexity"; llama.cpp `llama_sampler_mirostat_v2_apply`). A selector with per-row state.

Each step, per row:
  1. truncate: keep tokens whose surprise -log2 p is <= mu (at least the most probable one);
  2. sample from the kept tokens, renormalised, with the row's own generator;
  3. update mu <- mu - eta * (s - tau), s = -log2 of the sampled token's renormalised probability.
mu starts at 2 * tau. It lives in the decode context (`init_state` / `ctx.state_for`),
one value per row, so every generation starts afresh and the rows of a batch never mix.
Surprise <= mu is p >= 2**-mu, a threshold: no sort is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import SelectorBase
from decodekit_adaptive._mirostat import draw_kept, steer
from decodekit_adaptive.params import MirostatV2Params

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["MirostatV2"]


class MirostatV2(SelectorBase[MirostatV2Params]):
    """Sample while steering the surprise of the sampled tokens towards `tau` bits."""

    def init_state(self, ctx: DecodeContext) -> Tensor:
        """mu `[B]`, one per row, starting at 2 * tau."""
        return torch.full((ctx.batch_size,), 2.0 * self.params.tau, device=ctx.tokens.device)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        mu: Tensor = ctx.state_for(self)  # [B], updated in place below
        p = (logits if logits.dtype == torch.float64 else logits.float()).softmax(-1)
        # surprise <= mu  <=>  p >= 2**-mu; the most probable token stays even when its surprise is above mu
        floor = torch.minimum(torch.exp2(-mu).to(p.device)[:, None], p.amax(-1, keepdim=True))  # [B, 1]
        # p where p >= floor, else 0; branch-free (min with +-inf, then clamp), as truncation's remove_below.
        kept = torch.minimum(p, torch.copysign(torch.tensor(torch.inf, device=p.device), p - floor)).clamp_(min=0.0)
        tokens, surprise = draw_kept(p, kept, ctx)
        steer(mu, surprise, self.params.tau, self.params.eta)
        return tokens.squeeze(-1)

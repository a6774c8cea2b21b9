"""Mirostat, the first version (Basu et al. 2021, "Mirostat: a neural text decoding algorithm that directly
controls perplexity", Algorithm 1; llama.cpp `llama_sampler_mirostat_apply`, `--mirostat 1`). A selector with
per-row state.

Each step, per row, over the candidates (the finite logits), sorted by probability p_1 >= p_2 >= ...:
  1. estimate the Zipf exponent from the m most probable: s = sum t_i b_i / sum t_i^2 over the pairs
     i < min(m, n) - 1, t_i = ln((i + 2) / (i + 1)), b_i = ln(p_i / p_(i+1));
  2. k = (e 2^mu / (1 - V^-e))^(1/s), e = s - 1, V the vocabulary size; keep the int(k) most probable
     (at least one, at most every candidate);
  3. sample from them, renormalised, and steer mu <- mu - eta * (surprise - tau) as Mirostat v2 does.
mu starts at 2 * tau and lives in the decode context, one value per row (`init_state` / `ctx.state_for`).
k can be any number up to V, so this sorts the row: the one full sort no threshold avoids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import SelectorBase
from decodekit_adaptive._mirostat import draw_kept, steer
from decodekit_adaptive.params import MirostatParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Mirostat", "zipf_k"]


def zipf_k(head: Tensor, candidates: Tensor, mu: Tensor, vocab_size: int) -> Tensor:
    """How many tokens to keep `[B, 1]` (long, >= 1, <= the row's candidates): llama.cpp's k from the m most
    probable tokens' probabilities `head` `[B, m]`, sorted descending, `candidates` `[B, 1]` finite per row."""
    m = head.shape[-1]
    i = torch.arange(m - 1, device=head.device)
    t = torch.log((i + 2).to(head.dtype) / (i + 1).to(head.dtype))  # [m - 1]
    b = torch.log(head[:, :-1] / head[:, 1:])  # [B, m - 1]; a probability that underflows to 0 makes it inf
    pair = i + 1 < candidates  # both tokens of the pair are candidates (a removed token is none)
    s = torch.where(pair, t * b, 0.0).sum(-1, keepdim=True) / torch.where(pair, t * t, 0.0).sum(-1, keepdim=True)
    e = s - 1
    k = (e * torch.exp2(mu.to(head.device, head.dtype))[:, None] / (1 - torch.pow(float(vocab_size), -e))).pow(1 / s)
    # NaN (one candidate, s = 1): llama.cpp's max(int(NaN), 1) is 1. k past the candidates (+inf too) keeps them
    # all; llama.cpp's int(k) past INT_MAX is undefined in C++ (saturates on ARM, gives INT_MIN and so 1 on x86).
    k = torch.where(torch.isnan(k), 1.0, k)
    return torch.minimum(k, candidates.to(k.dtype)).clamp_(min=1).long()  # long() truncates, as int()


class Mirostat(SelectorBase[MirostatParams]):
    """Mirostat v1: keep a top-k sized by the estimated Zipf exponent and mu, sample, steer mu towards `tau`."""

    def init_state(self, ctx: DecodeContext) -> Tensor:
        """mu `[B]`, one per row, starting at 2 * tau."""
        return torch.full((ctx.batch_size,), 2.0 * self.params.tau, device=ctx.tokens.device)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        mu: Tensor = ctx.state_for(self)  # [B], updated in place below
        x = logits if logits.dtype == torch.float64 else logits.float()
        p = x.softmax(-1)
        ordered, order = x.sort(-1, descending=True)
        head = p.gather(-1, order[:, : min(self.params.m, x.shape[-1])])
        k = zipf_k(head, torch.isfinite(x).sum(-1, keepdim=True), mu, x.shape[-1])
        cut = ordered.gather(-1, k - 1)  # the k-th largest logit: its ties stay too (llama.cpp's sort picks among them)
        kept = torch.minimum(p, torch.copysign(torch.tensor(torch.inf, device=p.device), x - cut)).clamp_(min=0.0)
        tokens, surprise = draw_kept(p, kept, ctx)
        steer(mu, surprise, self.params.tau, self.params.eta)
        return tokens.squeeze(-1)

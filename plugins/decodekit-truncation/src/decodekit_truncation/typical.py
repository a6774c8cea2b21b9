"""Locally typical sampling (Meister et al. 2023, "Locally Typical Sampling"; HF `TypicalLogitsWarper`).

Keep the tokens whose surprise -log p is closest to the entropy H, taken in order of
|-log p - H| until their mass reaches `mass`. The order is a full sort by |surprise - H|:
this sampler cannot avoid one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_truncation._keep import NEG_INF, as_float32, entropy
from decodekit_truncation.params import TypicalParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Typical"]


class Typical(ProcessorBase[TypicalParams]):
    """Keep the most typical tokens (surprise closest to the entropy) up to probability mass `mass`."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if self.params.mass >= 1:
            return logits  # llama.cpp: mass 1 keeps everything
        x = as_float32(logits)
        logp = x.log_softmax(-1)
        p = logp.exp()
        distance = (-logp - entropy(logp)).abs()  # [B, V]; +inf on removed tokens
        sorted_distance, order = distance.sort(-1)
        mass_before_or_at = p.gather(-1, order).cumsum(-1)
        # As HF: the cut is the first sorted position whose cumulative mass reaches `mass`;
        # every token no farther from H than that one is kept (ties included).
        last = (mass_before_or_at < self.params.mass).sum(-1, keepdim=True).clamp_(max=x.shape[-1] - 1)
        cut = sorted_distance.gather(-1, last)
        if self.params.min_keep > 1:
            # At least the min_keep most typical (HF, llama.cpp), and every token tied with the last of them:
            # the sort orders ties arbitrarily, so keeping only min_keep would drop one of them at random.
            k = min(self.params.min_keep, x.shape[-1]) - 1
            cut = torch.maximum(cut, sorted_distance[:, k : k + 1])
        return logits.masked_fill(distance > cut, NEG_INF)

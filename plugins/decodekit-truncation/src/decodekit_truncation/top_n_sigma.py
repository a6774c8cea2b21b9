"""Top-nσ (Tang et al. 2024, "Top-nσ: Not All Logits Are You Need"; llama.cpp `llama_sampler_top_n_sigma_apply`).

Keep logits >= max - n·σ, where σ is the standard deviation (population, 1/N) of the
row's finite logits. Works on raw logits, so it is invariant to temperature. The rows'
mean and σ come from two fused reductions (Σd, ‖d‖) of d = x - max.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_truncation._keep import as_float32, remove_below
from decodekit_truncation.params import TopNSigmaParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TopNSigma"]


class TopNSigma(ProcessorBase[TopNSigmaParams]):
    """Keep tokens whose logit is within `n` standard deviations of the maximum logit."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if self.params.n == 0:
            return logits  # llama.cpp: n <= 0 is a no-op
        x = as_float32(logits)
        top = x.amax(-1, keepdim=True)
        # σ of the finite logits only: removed tokens count as 0 in the sums and not in `count`.
        # Shifted by the maximum, var = E[d²] - E[d]² keeps about six digits in float32.
        count = x.shape[-1] - torch.isneginf(x).sum(-1, keepdim=True, dtype=torch.int32)
        d = torch.nan_to_num_(x - top, neginf=0.0)
        mean = d.sum(-1, keepdim=True) / count
        mean_square = torch.linalg.vector_norm(d, dim=-1, keepdim=True).square_() / count
        sigma = (mean_square - mean.square()).clamp_(min=0).sqrt_()
        # n·σ is 0 where σ is (a flat row, a single candidate) for any n: n past float32's range
        # would make it inf·0 = NaN and remove every token. Where σ is NaN (sums past float32's
        # range) the cut is the maximum too: the most probable tokens always stay.
        spread = torch.where(sigma > 0, self.params.n * sigma, 0.0)
        return remove_below(logits, x, top - spread)

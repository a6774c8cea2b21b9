"""min-p: keep tokens with p >= p_min * p_max (Nguyen et al. 2024; HF `MinPLogitsWarper`, vLLM, llama.cpp).

In logit space, p_i >= p_min * p_max  <=>  x_i >= x_max + log(p_min): one max and one
compare, no softmax (llama.cpp `llama_sampler_min_p_apply` does the same).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from decodekit.stage import Candidates, ProcessorBase
from decodekit_truncation._keep import NEG_INF, as_float32, kth_largest, remove_below
from decodekit_truncation.params import MinPParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["MinP"]


class MinP(ProcessorBase[MinPParams]):
    """Remove tokens less than `p` times as probable as the most probable one."""

    def __init__(self, params: MinPParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._log_p = math.log(self.params.p) if self.params.p > 0 else NEG_INF

    def _threshold(self, top: Tensor, kth: Tensor | None) -> Tensor:
        """From the row maximum (and the `min_keep`-th largest logit) `[B, 1]`."""
        threshold = top + self._log_p
        return threshold if kth is None else torch.minimum(threshold, kth)

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        x = as_float32(logits)
        kth = kth_largest(x, self.params.min_keep) if self.params.min_keep > 1 else None
        return remove_below(logits, x, self._threshold(x.amax(-1, keepdim=True), kth))

    def on_candidates(self, c: Candidates, ctx: DecodeContext) -> Candidates:
        v = as_float32(c.values)  # [B, K] sorted descending: column 0 is the row maximum
        k = min(self.params.min_keep, v.shape[-1])
        kth = v[:, k - 1 : k] if self.params.min_keep > 1 else None
        return Candidates(remove_below(c.values, v, self._threshold(v[:, :1], kth)), c.indices)

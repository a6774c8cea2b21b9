"""Top-a (text-generation-webui / koboldcpp `sample_top_a`): keep tokens with p >= a · p_max².

In log-probabilities, p_i >= a·p_max²  <=>  log p_i >= log a + 2·log p_max.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_truncation._keep import as_float32, kth_largest, remove_below
from decodekit_truncation.params import TopAParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["TopA"]


class TopA(ProcessorBase[TopAParams]):
    """Remove tokens with p < a * p_max**2, keeping the `min_keep` most probable."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        if self.params.a == 0:
            return logits
        logp = as_float32(logits).log_softmax(-1)
        top = logp.amax(-1, keepdim=True)
        # Mathematically the threshold is <= log p_max (a <= 1); the minimum keeps the argmax under rounding too.
        kth = top if self.params.min_keep == 1 else kth_largest(logp, self.params.min_keep)
        return remove_below(logits, logp, torch.minimum(math.log(self.params.a) + 2 * top, kth))

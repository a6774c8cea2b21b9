"""Epsilon sampling (Hewitt et al. 2022, "Truncation Sampling as Language Model Desmoothing";
HF `EpsilonLogitsWarper`): remove tokens with probability below a fixed `epsilon`.

p_i >= epsilon  <=>  log p_i >= log(epsilon): one threshold per row on the log-probabilities.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_truncation._keep import as_float32, kth_largest, remove_below
from decodekit_truncation.params import EpsilonParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Epsilon"]


class Epsilon(ProcessorBase[EpsilonParams]):
    """Remove tokens with p < epsilon, keeping the `min_keep` most probable."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        logp = as_float32(logits).log_softmax(-1)
        kth = kth_largest(logp, self.params.min_keep)  # the min_keep most probable stay
        return remove_below(logits, logp, torch.clamp(kth, max=math.log(self.params.epsilon)))

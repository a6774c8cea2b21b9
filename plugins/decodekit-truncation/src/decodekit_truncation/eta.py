"""Eta sampling (Hewitt et al. 2022, "Truncation Sampling as Language Model Desmoothing";
HF `EtaLogitsWarper`): an entropy-dependent cutoff eta = min(epsilon, sqrt(epsilon) * exp(-H))."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from decodekit.stage import ProcessorBase
from decodekit_truncation._keep import as_float32, entropy, kth_largest, remove_below
from decodekit_truncation.params import EtaParams

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Eta"]


class Eta(ProcessorBase[EtaParams]):
    """Remove tokens with p < min(epsilon, sqrt(epsilon) * exp(-entropy)), keeping the `min_keep` most probable."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        eps = self.params.epsilon
        logp = as_float32(logits).log_softmax(-1)
        # log eta = min(log eps, log sqrt(eps) - H), compared with log p
        log_eta = torch.clamp(0.5 * math.log(eps) - entropy(logp), max=math.log(eps))  # [B, 1]
        return remove_below(logits, logp, torch.minimum(log_eta, kth_largest(logp, self.params.min_keep)))

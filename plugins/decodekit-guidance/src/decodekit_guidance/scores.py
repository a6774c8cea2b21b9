"""The guided scores of one step: transformers' `UnbatchedClassifierFreeGuidanceLogitsProcessor.__call__`."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["guided_scores"]


def guided_scores(cond: Tensor, uncond: Tensor, scale: float) -> Tensor:
    """`scale * (log_softmax(cond) - log_softmax(uncond)) + log_softmax(uncond)`, `[B, V]`, in float32 at least.

    The terms and their order are transformers' (equal bit for bit). A token either stream rules out (log-probability
    -inf: a masked vocabulary entry) stays removed; transformers' formula gives it NaN or +-inf there."""
    dtype = torch.promote_types(cond.dtype, torch.float32)
    c = torch.log_softmax(cond.to(dtype), -1)
    u = torch.log_softmax(uncond.to(dtype), -1)
    guided = scale * (c - u) + u
    removed = (c == float("-inf")) | (u == float("-inf"))
    return guided.masked_fill(removed, float("-inf"))

"""Helpers shared by the truncation samplers.

Most truncations here are a per-row threshold on the logits: compute the threshold `[B, 1]`
from a few reductions, then remove what lies below it (`remove_below`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from decodekit.candidates import top_candidates

__all__ = ["NEG_INF", "as_float32", "entropy", "keep_where_nonnegative", "kth_largest", "remove_below"]

NEG_INF = float("-inf")


def as_float32(logits: Tensor) -> Tensor:
    """The logits in float32 for the arithmetic (a no-op when they already are)."""
    return logits if logits.dtype == torch.float32 else logits.float()


def kth_largest(x: Tensor, k: int) -> Tensor:
    """The k-th largest value of each row of `x` `[B, V]`, `[B, 1]`; keeping x >= it keeps the k largest (and ties)."""
    k = min(k, x.shape[-1])
    if k == 1:
        return x.amax(-1, keepdim=True)
    if k == x.shape[-1]:
        return x.amin(-1, keepdim=True)
    return top_candidates(x, k)[0].values[:, k - 1 : k]  # the k largest, sorted: entry k-1 is the k-th


def remove_below(logits: Tensor, score: Tensor, threshold: Tensor) -> Tensor:
    """`logits` with -inf wherever `score` (their float32 copy, or log-probabilities) < `threshold` `[B, 1]`."""
    # score - threshold is -0.0 for a score of -0.0 and a threshold of +0.0 (a tie): a zero threshold made -0.0
    # leaves every tie a margin of +0.0, on [B, 1] (a where on [B, V] costs 6-11x copysign). Not -(0 - t): it
    # flips a NaN's sign, which copysign reads.
    return keep_where_nonnegative(logits, score - threshold.masked_fill(threshold == 0, -0.0))


def keep_where_nonnegative(logits: Tensor, margin: Tensor) -> Tensor:
    """`logits` where `margin` >= 0, -inf where it is < 0 (-0.0 counts as < 0: `remove_below` makes none).

    Branch-free: min(logits, +-inf) with the sign of the margin, faster on a CPU than `masked_fill` or a
    `where` (docs/benchmarks.md). NaN stays NaN.
    """
    cap = torch.copysign(torch.tensor(torch.inf, device=margin.device), margin)
    return torch.minimum(logits, cap if cap.dtype == logits.dtype else cap.to(logits.dtype))


def entropy(logp: Tensor) -> Tensor:
    """Shannon entropy in nats `[B, 1]` from log-probabilities `[B, V]`.

    Removed tokens have p = 0 and logp = -inf; their 0 * -inf = NaN terms are skipped.
    """
    return -logp.exp().mul_(logp).nansum(-1, keepdim=True)

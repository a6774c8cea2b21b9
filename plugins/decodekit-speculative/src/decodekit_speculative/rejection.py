"""The rejection rule of speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers
via Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model Decoding with
Speculative Sampling").

A drafted token x ~ q is accepted with probability min(1, p(x) / q(x)); on rejection the token is
drawn from the residual max(0, p - q), renormalised. Either way the token is distributed as p,
whatever q is. A deterministic draft (prompt lookup, or a greedy chain's draft) has a one-hot q.
With an "argmax" selector p is one-hot too, and the rule reduces to: accept while x equals the
target's argmax, then emit that argmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["draw", "probabilities", "verify_argmax", "verify_softmax"]

_BELOW_ONE = 1.0 - 2.0**-23


def draw(probs: Tensor, u: Tensor) -> int:
    """A token drawn from `probs` `[V]` (unnormalised, >= 0) by inverting its CDF at `u` in [0, 1);
    a token of probability 0 is never drawn (-1 when every probability is 0 or one is NaN)."""
    cdf = probs.cumsum(-1)
    total = float(cdf[-1])
    if not (math.isfinite(total) and total > 0.0):  # NaN, +inf or nothing left: not a distribution
        return -1
    # u < 1 - 2**-24 (a float32 uniform), so u * (1 - 2**-23) * total rounds strictly below the total:
    # the first entry of the CDF above it ends a step of non-zero width (as `decodekit.sample.inverse_cdf`).
    target = cdf[-1:] * (u.view(1) * _BELOW_ONE)
    return int(torch.searchsorted(cdf, target, right=True).clamp_(max=probs.shape[-1] - 1))


def verify_argmax(drafts: Sequence[int], target: Callable[[int], int]) -> tuple[int, int]:
    """`(n, token)`: the first `n` drafts equal the target's picks, and `token` is its pick after them.

    `target(j)` is the target's argmax at drafted position `j` (called for `j <= n` only).
    """
    for j, x in enumerate(drafts):
        t = target(j)
        if t != x:
            return j, t
    return len(drafts), target(len(drafts))


def verify_softmax(
    drafts: Sequence[int],
    draft_probs: Sequence[Tensor | None],
    target: Callable[[int], Tensor],
    uniform: Callable[[], Tensor],
) -> tuple[int, int]:
    """`(n, token)`: the rule keeps the first `n` drafts, then draws `token` (residual or bonus).

    draft_probs[j]: q at position j `[V]`, or None for a one-hot q at `drafts[j]`.
    target(j): p at position j `[V]` (called for `j <= n` only). uniform(): one draw in [0, 1).
    """
    for j, x in enumerate(drafts):
        p, q = target(j), draft_probs[j]
        q_x = 1.0 if q is None else float(q[x])
        if float(uniform()) * q_x < float(p[x]):  # u < p(x) / q(x), without the division
            continue
        if q is None:
            residual = p.clone()
            residual[x] = 0.0
        else:
            residual = (p - q).clamp_(min=0.0)
        if not float(residual.sum()) > 0.0:  # p == q up to rounding: rejection had probability ~0
            residual = p
        return j, draw(residual, uniform())
    return len(drafts), draw(target(len(drafts)), uniform())


def probabilities(processed: Tensor) -> Tensor:
    """softmax of processed logits `[..., V]`, in float32 at least."""
    x = processed if processed.dtype in (torch.float32, torch.float64) else processed.float()
    return x.softmax(-1)

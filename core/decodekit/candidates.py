"""`top_candidates`: the n largest logits of each row, and a bound on every logit left out.

Without `torch.topk` over the row (about three softmaxes on a CPU): view the row as R rows of
C = V // R columns, group c being column c. With m_1 >= m_2 >= ... the group maxima, pool the n+1
groups with the largest maxima (and the V mod R tokens past the grid). The pool holds n+1 group maxima,
so its (n+1)-th largest value is >= m_(n+1) >= every token left out: that value is the bound. How a
truncation uses them: docs/plugins.md ("The candidate fast path").
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
from torch import Tensor

from decodekit.stage import Candidates

__all__ = ["first_max", "keep_at_least", "top_candidates"]

_MIN_GAIN = 4  # use the grid only when the pool is at most V / 4 tokens


def _grid(vocab_size: int, n: int) -> tuple[int, int]:
    """`_plan_grid`, remembered when eager; plain arithmetic under compile, folded into the graph (dynamo
    warns on an lru_cache; marking it constant would import torch's compiler into every decode)."""
    return _plan_grid(vocab_size, n) if torch.compiler.is_compiling() else _remembered_grid(vocab_size, n)


def _plan_grid(vocab_size: int, n: int) -> tuple[int, int]:
    """(R, C) for pooling the n + 1 largest: R near sqrt(V / (n + 1)), which balances the two searches
    (V / R group maxima against a pool of R·(n + 1)); a divisor of V within a third of it if there is
    one, so that no token lies past the grid."""
    best = max(1, round(math.sqrt(vocab_size / (n + 1))))
    near = [r for r in range(max(1, best * 2 // 3), best * 4 // 3 + 1) if vocab_size % r == 0]
    R = min([(abs(r - best), r) for r in near])[1] if near else best  # no key=: dynamo cannot trace min(key=)
    return R, vocab_size // R


_remembered_grid = lru_cache(maxsize=64)(_plan_grid)


def top_candidates(logits: Tensor, n: int) -> tuple[Candidates, Tensor]:
    """The n largest logits of each row of `logits` `[B, V]`, sorted descending, and a bound `[B, 1]`
    that no logit left out exceeds (-inf when n >= V: the whole row is listed). NaN counts as largest."""
    B, V = logits.shape
    if n >= V:
        values, ids = logits.sort(-1, descending=True)
        return Candidates(values, ids), values.new_full((B, 1), float("-inf"))
    R, C = _grid(V, n)
    if (n + 1) * R * _MIN_GAIN > V:
        values, ids = logits.topk(n + 1)
    else:
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        # A view, also of a row slice; not as_strided, which makes inductor write the row before its maxima.
        grid = (logits if R * C == V else logits[:, : R * C]).view(B, R, C)
        groups = grid.amax(1, keepdim=True).topk(n + 1, sorted=False).indices  # [B, 1, n+1]
        starts = torch.arange(0, R * C, C, device=logits.device).view(1, R, 1)
        pool_ids = (starts + groups).view(B, -1)  # token r·C + group, for each grid row r
        if R * C < V:  # the tokens past the grid are always pooled
            tail = torch.arange(R * C, V, device=logits.device).expand(B, -1)
            pool_ids = torch.cat([pool_ids, tail], 1)
        values, pos = logits.gather(1, pool_ids).topk(n + 1)
        ids = pool_ids.gather(1, pos)
    return Candidates(values[:, :n], ids[:, :n]), values[:, n:]


def keep_at_least(c: Candidates, floor: Tensor, held: Tensor) -> Candidates:
    """The candidates >= each row's `floor` `[B, 1]`, and NaN in the rows not `held` `[B, 1]`: those
    whose kept set may reach past the candidates (for a floor, where it is not above the bound)."""
    values = c.values.masked_fill(c.values < floor, float("-inf"))
    return Candidates(torch.where(held, values, float("nan")), c.indices)


def first_max(c: Candidates) -> Tensor:
    """Per row `[B, 1]`, the position in `c` of the largest value with the lowest token id (what
    argmax picks on the dense row). Candidates are sorted by value; tied maxima come in any order."""
    ids = torch.where(c.values == c.values[:, :1], c.indices, torch.iinfo(c.indices.dtype).max)
    return ids.argmin(-1, keepdim=True)

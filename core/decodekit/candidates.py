"""`top_candidates`: the exact top k of each row, ties at the k-th included, as `Candidates`.

`torch.topk` over a 50,257-token row costs about three softmaxes on a CPU. One `amax` over
a view of the row, and two `topk`s over a few thousand values, find the same tokens:

    View the row as a grid of R rows and C = V // R columns; group c is column c (tokens
    c, C + c, 2C + c, ...). Let m_1 >= m_2 >= ... be the group maxima. Pool the k+1 groups
    with the largest maxima, R·(k+1) tokens, and the V mod R tokens past the grid. The pool
    holds k+1 group maxima, so its (k+1)-th largest value p_(k+1) is >= m_(k+1), which is
    >= every token left out. So when p_(k+1) < p_k, the pool's top k are the row's top k and
    nothing left out ties with the k-th.

Otherwise (a tie at the k-th value, or fewer than k finite logits) p_k is still the row's
k-th largest value v_k (every token > m_(k+1) is pooled, and if v_k <= m_(k+1) the pool's
k+1 maxima make p_k >= v_k), and a wider pass pools every group whose maximum reaches v_k.
Telling the two apart reads two values per row back to the host.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor

from decodekit.stage import Candidates

__all__ = ["top_candidates", "top_candidates_after"]

_GROUP_TARGET = 32  # tokens per group: R·(k+1) pooled tokens against V / R group maxima
_MIN_GAIN = 4  # use the grid only when the pool is at most V / 4 tokens


@lru_cache(maxsize=64)
def _grid_rows(vocab_size: int) -> int:
    """R, the rows of the grid: a divisor of V near 32 when there is one (no tail), else 32."""
    divisors = [r for r in range(16, 65) if vocab_size % r == 0]
    return min(divisors, key=lambda r: abs(r - _GROUP_TARGET)) if divisors else _GROUP_TARGET


def _floor(kth: Tensor) -> Tensor:
    """The smallest logit to keep: the k-th largest, or the smallest finite value when that is -inf.

    A row with fewer than k finite logits keeps just its finite ones; NaN stays NaN, so the
    row still reads as NaN to the chain's check.
    """
    return kth.clamp(min=torch.finfo(kth.dtype).min)


def _keep_at_least(values: Tensor, indices: Tensor, floor: Tensor) -> Candidates:
    """Candidates from sorted `values` [B, K]: entries below the row's `floor` [B, 1] become -inf."""
    return Candidates(values.masked_fill(values < floor, float("-inf")), indices)


@lru_cache(maxsize=64)
def _grid(vocab_size: int, device: torch.device) -> tuple[int, int, Tensor]:
    """(R, C, the token id of each grid row's first column `[1, R, 1]`) for a vocabulary on `device`."""
    R = _grid_rows(vocab_size)
    C = vocab_size // R  # 0 for a vocabulary smaller than R, where the grid is never used
    return R, C, torch.arange(0, R * C, max(C, 1), device=device)[None, :, None]


def top_candidates(logits: Tensor, k: int) -> Candidates:
    """Every token whose logit is >= its row's k-th largest (ties included), sorted descending.

    logits: [B, V] with 1 <= k < V. Rows keeping fewer tokens than the widest row are padded
    with -inf. Reads two values per row back from the device (two counts more after a tie).
    """
    c = top_candidates_after(logits, k, None)
    return _by_topk(logits, k) if c is None else c


def top_candidates_after(logits: Tensor, k: int, f: Callable[[Tensor], Tensor] | None) -> Candidates | None:
    """`top_candidates(f(logits), k)` for a non-decreasing elementwise `f`, computing f on k + 1 values per row.

    f keeps the order, so the top k of f(logits) are the top k of logits; it may make a tie
    (two logits, one value) but never break one. So when f of the (k+1)-th largest logit is
    below f of the k-th, no other token ties with the k-th after f either. None when that
    does not hold for every row (or the vocabulary is too small for the grid search to pay,
    `_MIN_GAIN`): then apply f and call `top_candidates`. `f=None` is the identity, and then
    ties are resolved here: None only when the grid does not pay.

    This is the grid search of the module docstring.
    """
    B, V = logits.shape
    R, C, offsets = _grid(V, logits.device)
    if k * R * _MIN_GAIN > V:
        return None
    n = R * C
    # [b, r, c] = token r·C + c; group c = column c. (Splitting a dimension is always a view.)
    grid = logits.view(B, R, C) if n == V else logits[:, :n].reshape(B, R, C)
    group_max = grid.amax(1, keepdim=True)  # [B, 1, C]
    # Pool the k+1 groups with the largest maxima (and the tokens past the grid). The pool holds
    # k+1 group maxima >= m_(k+1), so its (k+1)-th value is >= m_(k+1) >= every group left out:
    # when that value is below the pool's k-th, nothing left out can tie with the k-th either.
    # (The groups in any order: the pool's topk sorts what is kept, equal values in any order.)
    pool, ids = _pool(logits, offsets, n, group_max.topk(k + 1, sorted=False).indices)
    values, pos = pool.topk(k + 1)
    if f is not None:
        values = f(values)  # the order stays; ties may appear, and the check below sees them
    for kth, after in values[:, k - 1 : k + 1].tolist():  # host sync: the k-th and (k+1)-th value of each row
        if not after < kth:  # a tie with the k-th value (NaN fails too)
            break
    else:
        return Candidates(values[:, :k], ids.gather(1, pos[:, :k]))
    if f is not None:
        return None
    # Ties at the k-th value (or rows with fewer than k finite logits): pool every group that
    # can hold a kept token, keep every token tied with the k-th.
    floor = _floor(values[:, k - 1 : k])
    n_groups = max(int((group_max[:, 0] >= floor).sum(-1).amax()), k)  # host sync
    pool, ids = _pool(logits, offsets, n, group_max.topk(n_groups).indices)
    count = min(max(int((pool >= floor).sum(-1).amax()), k), pool.shape[1])  # host sync
    values, pos = pool.topk(count)
    return _keep_at_least(values, ids.gather(1, pos), floor)


def _pool(logits: Tensor, offsets: Tensor, grid_end: int, groups: Tensor) -> tuple[Tensor, Tensor]:
    """The logits `[B, R·G + P]` of the chosen `groups` `[B, 1, G]` of the grid whose rows start at
    token ids `offsets` `[1, R, 1]`, and of the P tokens from `grid_end` on (past the grid, always
    pooled), and their token ids."""
    B, V = logits.shape
    ids = (offsets + groups).view(B, -1)  # [B, R, G]: r·C + group
    if grid_end < V:
        ids = torch.cat([ids, torch.arange(grid_end, V, device=logits.device).expand(B, -1)], 1)
    return logits.gather(1, ids), ids


def _by_topk(logits: Tensor, k: int) -> Candidates:
    """`torch.topk` over the full row, widened to the ties at the k-th value."""
    values, ids = logits.topk(k)
    floor = _floor(values[:, -1:])
    count = int((logits >= floor).sum(-1).amax())  # host sync
    if count > k:
        values, ids = logits.topk(count)
    return _keep_at_least(values, ids, floor)

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

from functools import lru_cache

import torch
from torch import Tensor

from decodekit.stage import Candidates

__all__ = ["top_candidates"]

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
def _row_offsets(rows: int, cols: int, device: torch.device) -> Tensor:
    """The token id of each grid row's first column, `[1, rows, 1]`."""
    return torch.arange(0, rows * cols, cols, device=device)[None, :, None]


def top_candidates(logits: Tensor, k: int) -> Candidates:
    """Every token whose logit is >= its row's k-th largest (ties included), sorted descending.

    logits: [B, V] with 1 <= k < V. Rows keeping fewer tokens than the widest row are padded
    with -inf. Reads two values per row back from the device (two counts more after a tie).
    """
    B, V = logits.shape
    R = _grid_rows(V)
    if k * R * _MIN_GAIN > V:
        return _by_topk(logits, k)
    C = V // R
    n = R * C
    grid = (logits if n == V else logits[:, :n]).reshape(B, R, C)  # [b, r, c] = token r·C + c; group c = column c
    group_max = grid.amax(1)  # [B, C]
    # Pool the k+1 groups with the largest maxima (and the tokens past the grid). The pool holds
    # k+1 group maxima >= m_(k+1), so its (k+1)-th value is >= m_(k+1) >= every group left out:
    # when that value is below the pool's k-th, nothing left out can tie with the k-th either.
    index = group_max.topk(k + 1).indices.unsqueeze(1).expand(B, R, k + 1)  # [B, R, k+1]
    pool = grid.gather(2, index).view(B, R * (k + 1))
    if n < V:
        pool = torch.cat([pool, logits[:, n:]], 1)
    values, pos = pool.topk(k + 1)
    boundary = values[:, k - 1 : k + 1].tolist()  # host sync: the k-th and (k+1)-th value of each row
    if all(after < kth for kth, after in boundary):  # nothing ties with the k-th value (NaN fails too)
        ids = (_row_offsets(R, C, logits.device) + index).view(B, R * (k + 1))
        if n < V:
            ids = torch.cat([ids, torch.arange(n, V, device=logits.device).expand(B, -1)], 1)
        return Candidates(values[:, :k], ids.gather(1, pos[:, :k]))

    # Ties at the k-th value (or rows with fewer than k finite logits): pool every group that
    # can hold a kept token, keep every token tied with the k-th.
    floor = _floor(values[:, k - 1 : k])
    n_groups = max(int((group_max >= floor).sum(-1).amax()), k)  # host sync
    pool, pool_ids = _pool(logits, grid, group_max.topk(n_groups).indices)
    count = min(max(int((pool >= floor).sum(-1).amax()), k), pool.shape[1])  # host sync
    values, pos = pool.topk(count)
    return _keep_at_least(values, pool_ids.gather(1, pos), floor)


def _pool(logits: Tensor, grid: Tensor, groups: Tensor) -> tuple[Tensor, Tensor]:
    """The logits of the chosen `groups` [B, G] and of the tokens past the grid `[B, P]`, and their token ids."""
    B, R, C = grid.shape
    index = groups[:, None, :].expand(B, R, groups.shape[1])  # [B, R, G]
    values = grid.gather(2, index).view(B, -1)
    ids = (_row_offsets(R, C, logits.device) + index).view(B, -1)
    V = logits.shape[1]
    if V > R * C:  # the V mod R tokens past the grid are always pooled
        values = torch.cat([values, logits[:, R * C :]], 1)
        ids = torch.cat([ids, torch.arange(R * C, V, device=logits.device).expand(B, -1)], 1)
    return values, ids


def _by_topk(logits: Tensor, k: int) -> Candidates:
    """`torch.topk` over the full row, widened to the ties at the k-th value."""
    values, ids = logits.topk(k)
    floor = _floor(values[:, -1:])
    count = int((logits >= floor).sum(-1).amax())  # host sync
    if count > k:
        values, ids = logits.topk(count)
    return _keep_at_least(values, ids, floor)

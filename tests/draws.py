"""Seeded draws, for tests that work out by hand what a sampler picks (and that a selector with state picks per row
as alone), and a two-sample chi-square, for tests that compare a strategy's sampled tokens with `dk.generate`'s."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch
from scipy.stats import chi2_contingency

import decodekit as dk
from decodekit.context import row_generators


def uniform_draws(seed: int, n: int) -> list[float]:
    """The first `n` draws `ctx.uniform()` makes from a row generator seeded `seed`."""
    g = torch.Generator().manual_seed(seed)
    return [float(torch.empty(1).uniform_(generator=g)) for _ in range(n)]


def assert_rows_keep_their_own_state(selector: Any, steps: list[torch.Tensor], seeds: list[int]) -> None:
    """`selector` (one with per-row state) over `steps` (`[B, V]` logits each) on a batch of rows seeded `seeds`
    picks, and ends with the state, each row would alone with its seed."""

    def context(row_seeds: list[int]) -> dk.DecodeContext:
        rows = len(row_seeds)
        return dk.DecodeContext(
            tokens=torch.zeros(rows, 1, dtype=torch.long), generators=row_generators(row_seeds, rows)
        )

    batch = context(seeds)
    together = [selector(x, batch) for x in steps]
    for b, seed in enumerate(seeds):
        alone = context([seed])
        assert [int(selector(x[b : b + 1], alone)) for x in steps] == [int(t[b]) for t in together], b
        mine, theirs = alone.state_for(selector), batch.state_for(selector)
        assert math.isclose(float(mine[0]), float(theirs[b]), rel_tol=1e-6), b


def two_sample_p(a: Counter[tuple[int, ...]], b: Counter[tuple[int, ...]], min_count: int = 10) -> float:
    """Chi-square p-value that two samples come from one distribution; outcomes seen fewer than `min_count` times
    over both samples are pooled into one cell (left out when there are none)."""
    keys = sorted(set(a) | set(b))
    big = [key for key in keys if a[key] + b[key] >= min_count]
    rest = [key for key in keys if a[key] + b[key] < min_count]
    table = [[c[key] for key in big] + [sum(c[key] for key in rest)] for c in (a, b)]
    if not rest:
        table = [row[:-1] for row in table]
    return float(chi2_contingency(table).pvalue)

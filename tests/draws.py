"""Seeded draws, for tests that work out by hand what a sampler picks, and a two-sample chi-square, for tests
that compare a strategy's sampled tokens with `dk.generate`'s."""

from __future__ import annotations

from collections import Counter

import torch
from scipy.stats import chi2_contingency


def uniform_draws(seed: int, n: int) -> list[float]:
    """The first `n` draws `ctx.uniform()` makes from a row generator seeded `seed`."""
    g = torch.Generator().manual_seed(seed)
    return [float(torch.empty(1).uniform_(generator=g)) for _ in range(n)]


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

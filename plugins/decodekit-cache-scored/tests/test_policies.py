"""Each policy against a second implementation: a float64 simulation, one token set at a time, of which
entries a row keeps; hand-worked ties; SnapKV's prompt scores written out as kvpress computes them."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch
import torch.nn.functional as F
from decodekit_cache_scored.cache import ScoredCache

import decodekit as dk

D, H = 8, 2  # head dim, query heads (one kv-head)
SPEC = dk.CacheSpec(n_layers=1, n_heads=H, n_kv_heads=1, head_dim=D, batch_size=1, capacity=64, dtype=torch.float64)


def simulate(
    policy: str, blocks: list[tuple[torch.Tensor, torch.Tensor]], budget: int, sinks: int, recent: int
) -> list[set[int]]:
    """The slots held after each forward (`blocks`: keys `[T, D]`, queries `[H, T, D]`), per the docs' rules."""
    keys: dict[int, torch.Tensor] = {}
    score: dict[int, float] = {}
    held: list[int] = []
    after = []
    length = 0
    for k, q in blocks:
        T = k.shape[0]
        if len(held) > budget:  # the lazy compression, before the forward writes
            held = top(held, score, budget, sinks, length - recent)
        new = list(range(length, length + T))
        for i, t in enumerate(new):
            keys[t] = k[i]
            score[t] = -float(k[i].norm()) if policy == "knorm" else (float(t) if policy == "streaming" else 0.0)
        seen = held + new
        K = torch.stack([keys[t] for t in seen])
        for i in range(T):
            visible = len(held) + i + 1
            w = torch.softmax(q[:, i] @ K[:visible].T / math.sqrt(D), -1).mean(0)  # mean over the query heads
            for j, t in enumerate(seen[:visible]):
                if policy == "h2o":
                    score[t] += float(w[j])
                elif policy == "tova" and i == T - 1:
                    score[t] = float(w[j])
            if policy == "tova" and i == T - 1:
                for t in seen[visible:]:
                    score[t] = 0.0
        held = seen
        length += T
        if T > 3:  # a long block is compressed as soon as it is scored
            held = top(held, score, budget, sinks, length - recent)
        after.append(set(top(held, score, budget, sinks, length - recent) if len(held) > budget else held))
    return after


def top(held: list[int], score: dict[int, float], budget: int, sinks: int, recent_from: int) -> list[int]:
    """The `budget` best: sinks and recent first, then by score, the newer on a tie; in slot order."""

    def key(t: int) -> tuple[float, int]:
        return (math.inf if t < sinks or t >= recent_from else score[t], t)

    return sorted(sorted(held, key=key, reverse=True)[:budget])


def drive(made: dk.KVCache, blocks: list[tuple[torch.Tensor, torch.Tensor]]) -> list[set[int]]:
    """Feed `blocks` (positions 0, 1, ...) as a model would, and read what the cache keeps after each."""
    cache = cast(ScoredCache, made)  # every cache here is a scored one
    out = []
    for k, q in blocks:
        T = k.shape[0]
        start = cache.length
        kk = k[None, None]
        cache.update(0, kk, kk)
        cache.attention_mask(0, torch.arange(start, start + T)[None])
        if hasattr(cache, "observe"):
            cache.observe(0, q[None])
        kept = cache.kept(0)[0, 0]
        out.append(set(kept[kept >= 0].tolist()))
    return out


def blocks(seed: int, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(T, D, generator=g, dtype=torch.float64),
            3 * torch.randn(H, T, D, generator=g, dtype=torch.float64),
        )
        for T in sizes
    ]


@pytest.mark.parametrize("policy", ["h2o", "tova", "knorm", "streaming"])
@pytest.mark.parametrize(
    "sizes", [[1] * 30, [2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 1, 1, 2, 1, 1], [12, 1, 1, 2, 1, 3, 1, 1, 1]]
)
def test_kept_entries_equal_the_simulation(policy: str, sizes: list[int]) -> None:
    data = blocks(0, sizes)
    cache = dk.create_cache(policy, SPEC, budget=6, sinks=1, recent=2, slack=3)
    assert drive(cache, data) == simulate(policy, data, budget=6, sinks=1, recent=2)


def test_the_simulation_is_not_one_rule_for_all() -> None:
    """The four policies keep different entries on the same data: the comparison above can fail."""
    data = blocks(1, [1] * 30)
    kept = {p: simulate(p, data, budget=6, sinks=1, recent=2)[-1] for p in ("h2o", "tova", "knorm", "streaming")}
    assert len({frozenset(s) for s in kept.values()}) == 4


def test_ties_keep_the_newer_entry() -> None:
    """Equal norms: key-norm keeps the sink, the recent one, then the newest; TOVA with zero queries likewise."""
    k = torch.ones(10, D, dtype=torch.float64)
    q = torch.zeros(H, 10, D, dtype=torch.float64)
    data = [(k[i : i + 1], q[:, i : i + 1]) for i in range(10)]
    for policy in ("knorm", "tova"):
        cache = dk.create_cache(policy, SPEC, budget=4, sinks=1, recent=1, slack=3)
        assert drive(cache, data)[-1] == {0, 7, 8, 9}


def test_snapkv_scores_a_prompt_as_kvpress_does() -> None:
    """A prompt of 24: the window's 6 queries, their mean weights on the first 18 keys, pooled (5, zero padding
    counted), top 4 of them plus the window: the same entries as the formula written out here."""
    T, w, budget = 24, 6, 10
    g = torch.Generator().manual_seed(2)
    k = torch.randn(T, D, generator=g, dtype=torch.float64)
    q = 3 * torch.randn(H, T, D, generator=g, dtype=torch.float64)
    cache = dk.create_cache("snapkv", SPEC, budget=budget, window=w, kernel=5, slack=3, sinks=0, recent=0)
    kept = drive(cache, [(k, q)])[0]
    weights = torch.softmax(
        (q @ k.T / math.sqrt(D)).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf), -1
    )
    observed = weights[:, T - w :, : T - w].mean(1)  # [H, T - w]
    pooled = F.avg_pool1d(observed[None], 5, stride=1, padding=2)[0].mean(0)  # one kv-head: mean over its heads
    want = set(pooled.topk(budget - w).indices.tolist()) | set(range(T - w, T))
    assert kept == want


def test_snapkv_scores_each_long_block_over_what_is_held_in_slot_order() -> None:
    """A second block of 24 (a chunk of a streamed text) is scored as the first, over the 10 held entries and
    itself, pooled in slot order with the window counted as zeros."""
    T, w, budget = 24, 6, 10
    g = torch.Generator().manual_seed(3)
    k = torch.randn(2 * T, D, generator=g, dtype=torch.float64)
    q = 3 * torch.randn(H, 2 * T, D, generator=g, dtype=torch.float64)
    cache = dk.create_cache("snapkv", SPEC, budget=budget, window=w, kernel=5, slack=3, sinks=0, recent=0)
    held = sorted(drive(cache, [(k[:T], q[:, :T])])[0])
    kept = drive(cache, [(k[T:], q[:, T:])])[0]
    seen = held + list(range(T, 2 * T))  # slot order
    visible = torch.tensor([[j < len(held) or seen[j] <= T + i for j in range(len(seen))] for i in range(T)])
    scores = (q[:, T:] @ k[seen].T / math.sqrt(D)).masked_fill(~visible, -math.inf)
    observed = torch.softmax(scores, -1)[:, T - w :].mean(1)  # [H, S]
    observed[:, -w:] = 0  # the window counts as zero padding
    pooled = F.avg_pool1d(observed[None], 5, stride=1, padding=2)[0].mean(0)[:-w]
    want = {seen[j] for j in pooled.topk(budget - w).indices.tolist()} | set(range(2 * T - w, 2 * T))
    assert kept == want

"""Mirostat v1 (`mirostat`): the mu update over two steps worked by hand, a reference written from llama.cpp's
`llama_sampler_mirostat_apply`, per-row state, removed tokens, the candidate count k."""

from __future__ import annotations

import math

import pytest
import torch
from draws import assert_rows_keep_their_own_state, uniform_draws

import decodekit as dk
from decodekit.context import row_generators
from decodekit.testing.inputs import random_logits

INF = float("-inf")


def context(seeds: list[int]) -> dk.DecodeContext:
    return dk.DecodeContext(
        tokens=torch.zeros(len(seeds), 1, dtype=torch.long), generators=row_generators(seeds, len(seeds))
    )


def reference_k(row: list[float], mu: float, m: int = 100) -> float:
    """llama.cpp's k before `int()`, line for line: softmax over the candidates (the finite logits: what its
    truncating samplers leave in the array), sorted; s_hat from the first m; k from s_hat and mu."""
    logits = sorted((v for v in row if v != INF), reverse=True)
    exps = [math.exp(v - logits[0]) for v in logits]
    p = [e / sum(exps) for e in exps]
    sum_ti_bi = sum_ti_sq = 0.0
    i = 0
    while i < m - 1 and i < len(p) - 1:
        t_i = math.log((i + 2) / (i + 1))
        b_i = math.log(p[i] / p[i + 1]) if p[i + 1] > 0 else math.inf
        sum_ti_bi += t_i * b_i
        sum_ti_sq += t_i * t_i
        i += 1
    if sum_ti_sq == 0:
        return math.nan  # one candidate: 0 / 0
    s_hat = sum_ti_bi / sum_ti_sq
    epsilon_hat = s_hat - 1
    try:
        return float((epsilon_hat * 2**mu / (1 - len(row) ** -epsilon_hat)) ** (1 / s_hat))
    except (ZeroDivisionError, OverflowError):
        return math.nan if epsilon_hat == 0 else math.inf


def reference_step(row: list[float], mu: float, tau: float, eta: float, u: float, m: int = 100) -> tuple[int, float]:
    """One step: the token (inverse CDF at `u` over the kept tokens in id order, our draw) and the new mu.

    Kept: the int(k) most probable candidates (at least 1, at most all; NaN: 1) and the ties of the last."""
    k = reference_k(row, mu, m)
    finite = sorted((v for v in row if v != INF), reverse=True)
    k_int = 1 if math.isnan(k) else max(1, min(len(finite), int(min(k, 1e9))))
    cut = finite[k_int - 1]
    weights = [math.exp(v - finite[0]) if v != INF and v >= cut else 0.0 for v in row]
    total, acc = sum(weights), 0.0
    token = max(i for i, w in enumerate(weights) if w > 0)  # u * total rounding past the last edge
    for i, w in enumerate(weights):
        acc += w
        if w > 0 and u * total < acc:
            token = i
            break
    surprise = -math.log2(weights[token] / total)
    return token, mu - eta * (surprise - tau)


# p proportional to 1/r^2 (Zipf, s = 2) by rank r: tokens 1, 3, 0, 2 have p = 1, 1/4, 1/9, 1/16 (/1.4236).
ZIPF = torch.tensor([[1 / 9, 1.0, 1 / 16, 1 / 4]]).log()
TAU, ETA = 1.05, 0.5


def test_mu_update_over_two_steps() -> None:
    # b_i = ln(p_i / p_(i+1)) = 2 t_i, so s_hat = 2, e = 1 and k = (2^mu / (1 - 4^-1))^(1/2) = sqrt(2^mu / 0.75).
    # Step 1, mu = 2.1: k = sqrt(4.2871 / 0.75) = 2.391 -> the two most probable, tokens 1 and 3, renormalised
    # [0.8, 0.2]; inverse CDF in id order picks token 1 when u < 0.8.
    #   token 1: surprise log2(1.25) = 0.321928, mu = 2.1 - 0.5 * (0.321928 - 1.05) = 2.464036
    #   token 3: surprise log2(5)    = 2.321928, mu = 2.1 - 0.5 * (2.321928 - 1.05) = 1.464036
    # Step 2:
    #   mu = 2.464036: k = sqrt(5.5176 / 0.75) = 2.712 -> {1, 3} again: token 1 -> 2.828072, token 3 -> 1.828072
    #   mu = 1.464036: k = sqrt(2.7588 / 0.75) = 1.918 -> token 1 alone, surprise 0: mu = 1.464036 + 0.525 = 1.989036
    seed_a = next(s for s in range(100) if uniform_draws(s, 1)[0] < 0.8)  # row A picks token 1 first
    seed_b = next(s for s in range(100) if uniform_draws(s, 1)[0] >= 0.8)  # row B picks token 3 first
    ctx = context([seed_a, seed_b])
    mirostat = dk.create("mirostat", tau=TAU, eta=ETA)
    x = ZIPF.expand(2, -1)

    assert mirostat(x, ctx).tolist() == [1, 3]
    mu = ctx.state_for(mirostat)
    assert torch.allclose(mu, torch.tensor([2.464036, 1.464036]), atol=1e-5)

    a_picks_1 = uniform_draws(seed_a, 2)[1] < 0.8
    assert mirostat(x, ctx).tolist() == [1 if a_picks_1 else 3, 1]
    assert torch.allclose(mu, torch.tensor([2.828072 if a_picks_1 else 1.828072, 1.989036]), atol=1e-5)


CASES = [
    # (tau, eta, m, vocabulary, scale, removed): k from 1 to the whole row, m below and above the candidates
    (5.0, 0.1, 100, 300, 2.0, 0.25),
    (3.0, 0.5, 100, 300, 4.0, 0.0),
    (3.0, 0.3, 100, 50, 1.0, 0.5),  # fewer candidates than m
    (2.0, 1.0, 5, 300, 3.0, 0.25),
    (3.0, 0.2, 100, 300, 0.3, 0.9),  # near-flat rows of 30 candidates
]


@pytest.mark.parametrize(("tau", "eta", "m", "vocab", "scale", "removed"), CASES)
def test_matches_the_reference_from_llama_cpp(
    tau: float, eta: float, m: int, vocab: int, scale: float, removed: float
) -> None:
    """Twelve steps on eight rows: each row's token and mu as llama.cpp's algorithm gives them (with our draw)."""
    rows, steps = 8, 12
    seeds = list(range(40, 40 + rows))
    uniforms = [uniform_draws(s, steps) for s in seeds]
    mirostat = dk.create("mirostat", tau=tau, eta=eta, m=m)
    ctx = context(seeds)
    mus = [2 * tau] * rows
    compared, truncated = 0, 0
    for step in range(steps):
        x = random_logits(rows, vocab, seed=100 * step + vocab, removed=removed) / 3 * scale
        tokens = mirostat(x, ctx).tolist()
        for b in range(rows):
            row = x[b].tolist()
            k = reference_k(row, mus[b], m)
            truncated += 1 < k < int(torch.isfinite(x[b]).sum())
            if not math.isnan(k) and abs(k - round(k)) < 1e-3 and k < 1e9:
                mus[b] = float(ctx.state_for(mirostat)[b])  # int(k) is the rounding's to decide: take ours, go on
                continue
            token, mus[b] = reference_step(row, mus[b], tau, eta, uniforms[b][step], m)
            assert tokens[b] == token, (step, b, k)
            assert math.isclose(float(ctx.state_for(mirostat)[b]), mus[b], rel_tol=1e-4, abs_tol=1e-4), (step, b)
            compared += 1
    assert compared >= rows * steps * 0.9
    assert truncated >= 4  # steps that keep more than one token and fewer than all


def test_k_counts_only_the_candidates_and_the_vocabulary() -> None:
    """Removed tokens are not candidates: a row cut by an earlier stage gives llama.cpp's k for the array that
    stage leaves, with V the vocabulary size (llama.cpp's n_vocab), not the number left."""
    from decodekit_adaptive.mirostat import zipf_k

    x = random_logits(4, 200, seed=7, removed=0.6)
    p = x.softmax(-1)
    head = p.sort(-1, descending=True).values[:, :100]
    mu = torch.tensor([4.0, 6.0, 8.0, 10.0])
    k = zipf_k(head, torch.isfinite(x).sum(-1, keepdim=True), mu, 200)[:, 0].tolist()
    expected = [max(1, min(80, int(reference_k(x[b].tolist(), float(mu[b]))))) for b in range(4)]
    assert k == expected and len(set(k)) > 1


def test_one_candidate_is_kept_and_steers_mu_by_zero_surprise() -> None:
    # One finite token: no pair, s_hat = 0/0 (llama.cpp: max(int(NaN), 1) = 1): it is drawn, surprise 0.
    x = torch.tensor([[INF, 3.0, INF, INF]])
    ctx = context([0])
    mirostat = dk.create("mirostat", tau=2.0, eta=0.5)
    assert mirostat(x, ctx).tolist() == [1]
    assert ctx.state_for(mirostat).tolist() == [4.0 + 0.5 * 2.0]


def test_a_flat_row_keeps_every_candidate() -> None:
    # s_hat = 0: k = (2^mu / (V - 1))^inf = inf once 2^mu > V - 1, so every candidate stays (llama.cpp's int(inf)
    # is undefined: ARM saturates to every candidate, x86 gives INT_MIN and so one).
    x = torch.tensor([[0.0, INF, 0.0, INF, 0.0]]).expand(400, -1)
    picks = dk.create("mirostat", tau=2.0)(x, context(list(range(400))))
    assert set(picks.tolist()) == {0, 2, 4}


def test_ties_at_the_kth_token_all_stay() -> None:
    # p by rank 1, 1/4, 1/4, 1/16 (/1.5625): b = [ln 4, 0, ln 4], s_hat = ln 4 (t_1 + t_3) / sum t_i^2 = 1.8685,
    # k = (0.8685 * 2^2.1 / (1 - 4^-0.8685))^(1/1.8685) = 2.446: token 1 and one of the tied 3 and 0, so both.
    x = torch.tensor([[1 / 4, 1.0, 1 / 16, 1 / 4]]).log().expand(2000, -1)
    ctx = context(list(range(2000)))
    mirostat = dk.create("mirostat", tau=TAU)
    assert math.isclose(reference_k(x[0].tolist(), 2 * TAU), 2.446, abs_tol=1e-3)
    assert set(mirostat(x, ctx).tolist()) == {0, 1, 3}


def test_removed_tokens_are_never_sampled() -> None:
    x = torch.where(torch.rand(64, 40, generator=torch.Generator().manual_seed(2)) < 0.7, INF, torch.randn(64, 40))
    x[:, 0] = 0.0
    ctx = context(list(range(64)))
    mirostat = dk.create("mirostat", tau=9.0, eta=0.1)
    for _ in range(5):
        picks = mirostat(x, ctx)
        assert not bool(torch.isneginf(x.gather(1, picks[:, None])).any())


def test_rows_keep_their_own_mu_across_steps() -> None:
    # Five steps on a batch of three different rows equal five steps on each row alone.
    torch.manual_seed(0)
    steps = [torch.randn(3, 300) * 2 for _ in range(5)]
    assert_rows_keep_their_own_state(dk.create("mirostat", 3.0, 0.3), steps, [10, 11, 12])


def test_mu_starts_at_twice_tau_in_every_new_context() -> None:
    mirostat = dk.create("mirostat", 3.0, 0.1)
    for _ in range(2):  # the decode loop builds a fresh context per generation
        ctx = context([0, 1, 2])
        dk.Chain([], selector=mirostat).init_state(ctx)
        assert ctx.state_for(mirostat).tolist() == [6.0, 6.0, 6.0]
        mirostat(torch.randn(3, 20), ctx)
        assert not torch.equal(ctx.state_for(mirostat), torch.full((3,), 6.0))


@pytest.mark.xdist_group("compile")  # as tests/test_step_sync_free.py: inductor once per worker
def test_a_compiled_step_picks_as_eager() -> None:
    """The sort, the estimate and k stay on the device: compiled steps pick the eager tokens, mu to rounding."""
    torch._dynamo.reset()
    chain = dk.Chain.parse("top_k(60) | mirostat(3.0, 0.5)")
    x = torch.randn(3, 101, generator=torch.Generator().manual_seed(0)) * 2
    ctx = dk.DecodeContext(tokens=torch.zeros(3, 8, dtype=torch.long), generators=row_generators(4, 3))
    eager, compiled = ctx.fork(), chain.compiled()
    for _ in range(6):
        ctx.draw_uniforms()
        assert compiled.step(x, ctx).ids == chain.step(x, eager).ids
    torch.testing.assert_close(ctx.state_for(chain.selector), eager.state_for(chain.selector))

"""Mirostat v2: the mu update over two steps worked by hand, per-row state, per-generation reset."""

from __future__ import annotations

import torch
from draws import assert_rows_keep_their_own_state, uniform_draws

import decodekit as dk
from decodekit.context import row_generators

# p = [0.5, 0.25, 0.125, 0.125]: surprises [1, 2, 3, 3] bits. tau = 1.05, eta = 0.5, so mu starts at 2.1
# (not exactly 2, so no surprise sits on the cut).
LOGITS = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).log()
TAU, ETA = 1.05, 0.5


def test_mu_update_over_two_steps() -> None:
    # Step 1, mu = 2.1: tokens with surprise <= 2.1 stay, {0, 1}, renormalised [2/3, 1/3]; sampling by
    # inverse CDF picks token 0 when u < 2/3.
    #   token 0: surprise log2(3/2) = 0.584963, mu = 2.1 - 0.5 * (0.584963 - 1.05) = 2.332519
    #   token 1: surprise log2(3)   = 1.584963, mu = 2.1 - 0.5 * (1.584963 - 1.05) = 1.832519
    # Step 2, same logits:
    #   mu = 2.332519: {0, 1} stay again; token 0 -> mu = 2.565037, token 1 -> mu = 2.065037
    #   mu = 1.832519: only {0} stays (surprise 2 > mu), renormalised p = 1, surprise 0:
    #                  mu = 1.832519 - 0.5 * (0 - 1.05) = 2.357519
    seed_a = next(s for s in range(100) if uniform_draws(s, 1)[0] < 2 / 3)  # row A picks token 0 first
    seed_b = next(s for s in range(100) if uniform_draws(s, 1)[0] >= 2 / 3)  # row B picks token 1 first
    ctx = dk.DecodeContext(tokens=torch.zeros(2, 1, dtype=torch.long), generators=row_generators([seed_a, seed_b], 2))
    mirostat = dk.create("mirostat_v2", tau=TAU, eta=ETA)
    x = LOGITS.expand(2, -1)

    assert mirostat(x, ctx).tolist() == [0, 1]
    mu = ctx.state_for(mirostat)
    assert torch.allclose(mu, torch.tensor([2.332519, 1.832519]), atol=1e-5)

    second = mirostat(x, ctx).tolist()
    a_picks_0 = uniform_draws(seed_a, 2)[1] < 2 / 3
    assert second == [0 if a_picks_0 else 1, 0]
    assert torch.allclose(mu, torch.tensor([2.565037 if a_picks_0 else 2.065037, 2.357519]), atol=1e-5)


def test_the_most_probable_token_stays_when_every_surprise_is_above_mu() -> None:
    # tau = 0.2: mu = 0.4 bits, below every surprise [1, 2, 3, 3]; the most probable token stays (llama.cpp keeps
    # one token when none is within mu), renormalised p = 1, surprise 0: mu = 0.4 - 0.5 * (0 - 0.2) = 0.5.
    rows = 4
    ctx = dk.DecodeContext(tokens=torch.zeros(rows, 1, dtype=torch.long), generators=row_generators(0, rows))
    mirostat = dk.create("mirostat_v2", tau=0.2, eta=0.5)
    assert mirostat(LOGITS.expand(rows, -1), ctx).tolist() == [0] * rows
    assert torch.allclose(ctx.state_for(mirostat), torch.full((rows,), 0.5))


def test_mu_starts_at_twice_tau_in_every_new_context() -> None:
    mirostat = dk.create("mirostat_v2", 3.0, 0.1)
    for _ in range(2):  # the decode loop builds a fresh context per generation
        ctx = dk.DecodeContext(tokens=torch.zeros(3, 1, dtype=torch.long), generators=row_generators(0, 3))
        dk.Chain([], selector=mirostat).init_state(ctx)
        assert ctx.state_for(mirostat).tolist() == [6.0, 6.0, 6.0]
        mirostat(torch.randn(3, 20), ctx)
        assert not torch.equal(ctx.state_for(mirostat), torch.full((3,), 6.0))


def test_rows_keep_their_own_mu_across_steps() -> None:
    # Five steps on a batch of three different rows equal five steps on each row alone.
    torch.manual_seed(0)
    steps = [torch.randn(3, 30) * 2 for _ in range(5)]
    assert_rows_keep_their_own_state(dk.create("mirostat_v2", 2.0, 0.3), steps, [10, 11, 12])


def test_removed_tokens_are_never_sampled() -> None:
    x = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]]).expand(64, -1)
    ctx = dk.DecodeContext(tokens=torch.zeros(64, 1, dtype=torch.long), generators=row_generators(1, 64))
    picks = dk.create("mirostat_v2", 8.0, 0.1)(x, ctx)
    assert set(picks.tolist()) == {0, 2}

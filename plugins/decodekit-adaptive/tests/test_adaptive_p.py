"""Adaptive-p: the reshaped logits worked by hand, tokens and the moving average against a re-implementation of
llama.cpp's `llama_sampler_adaptive_p_apply` / `_accept` written from its source, per-row state, and "off"."""

from __future__ import annotations

import math

import pytest
import torch
from draws import assert_rows_keep_their_own_state, uniform_draws

import decodekit as dk
from decodekit.context import row_generators

# p = [0.5, 0.25, 0.125, 0.125]; target 0.3 and a fresh average (0.3): adapted target 2 * 0.3 - 0.3 = 0.3.
LOGITS = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).log()


def test_the_reshaped_logits_worked_by_hand() -> None:
    """d = |p - 0.3| / 0.3 = [2/3, 1/6, 7/12, 7/12]; logit 5 - 10 d^2 / (1 + d):
    2/3: 10 (4/9) / (5/3) = 2.666667 -> 2.333333; 1/6: 10 (1/36) / (7/6) = 0.238095 -> 4.761905;
    7/12: 10 (49/144) / (19/12) = 2.149123 -> 2.850877. The token nearest the target is the most likely."""
    from decodekit_adaptive.adaptive_p import reshaped_logits

    p = LOGITS.softmax(-1)
    shaped = reshaped_logits(LOGITS, p, torch.tensor([[0.3]]))
    assert torch.allclose(shaped, torch.tensor([[2.333333, 4.761905, 2.850877, 2.850877]]), atol=1e-5)
    removed = torch.tensor([[0.0, -torch.inf, 0.0, 1.0]])
    assert reshaped_logits(removed, removed.softmax(-1), torch.tensor([[0.3]]))[0, 1] == -torch.inf


def test_the_average_moves_by_the_sampled_tokens_original_probability() -> None:
    """Step 1 draws from softmax([2.333333, 4.761905, 2.850877, 2.850877]) = [0.0628, 0.7122, 0.1054, 0.1054]
    (1 / (1 + e^(2.333333 - 4.761905) + 2 e^(2.850877 - 4.761905)) = 0.71224); a row whose uniform falls in
    [0.0628, 0.7750) picks token 1, p = 0.25: average 0.9 * 0.3 + 0.1 * 0.25 = 0.295."""
    q = torch.tensor([2.333333, 4.761905, 2.850877, 2.850877]).softmax(-1).tolist()
    seed = next(s for s in range(100) if q[0] <= uniform_draws(s, 1)[0] < q[0] + q[1] - 1e-4)
    ctx = dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long), generators=row_generators([seed], 1))
    adaptive = dk.create("adaptive_p", target=0.3, decay=0.9)
    assert adaptive(LOGITS, ctx).tolist() == [1]
    assert math.isclose(float(ctx.state_for(adaptive)[0]), 0.295, rel_tol=1e-6)


def llama_cpp_adaptive_p(rows: list[list[float]], target: float, decay: float, draws: list[float]) -> list[int]:
    """llama.cpp's adaptive-p over one row's steps, in Python floats: its two sums, started at their fixed point,
    its transform, and the draw by inverse CDF in token-id order at `draws` (llama.cpp's own draw is
    `std::discrete_distribution` over its mt19937: other tokens for the same seed)."""
    weighted, total, picks = target / (1 - decay), 1 / (1 - decay), []
    for x, u in zip(rows, draws):
        top = max(x)
        e = [math.exp(v - top) if v != -math.inf else 0.0 for v in x]
        p = [v / sum(e) for v in e]
        adapted = min(max(2 * min(max(target, 0.0), 1.0) - weighted / total, 0.0), 1.0)
        shaped = []
        for v, pv in zip(x, p):
            d = abs((pv - adapted) / 0.3)
            shaped.append(-math.inf if v == -math.inf else 5 - 10 * d * d / (1 + d))
        w = [math.exp(v - 5) if v != -math.inf else 0.0 for v in shaped]
        cum, token = 0.0, len(w) - 1
        for i, wi in enumerate(w):
            cum += wi
            if cum > u * sum(w):
                token = i
                break
        picks.append(token)
        weighted, total = p[token] + decay * weighted, 1 + decay * total
    return picks


@pytest.mark.parametrize(("target", "decay"), [(0.3, 0.9), (0.6, 0.5), (0.05, 0.99), (1.0, 0.0), (0.0, 0.9)])
def test_tokens_match_llama_cpp_over_many_steps(target: float, decay: float) -> None:
    torch.manual_seed(1)
    steps = [torch.randn(4, 12) * 2 for _ in range(40)]
    for step in steps:
        step[:, 3] = -torch.inf  # a token an earlier stage removed
    seeds = [7, 8, 9, 10]
    ctx = dk.DecodeContext(tokens=torch.zeros(4, 1, dtype=torch.long), generators=row_generators(seeds, 4))
    adaptive = dk.create("adaptive_p", target=target, decay=decay)
    ours = torch.stack([adaptive(x.double(), ctx) for x in steps], dim=1).tolist()
    for b, seed in enumerate(seeds):
        theirs = llama_cpp_adaptive_p([x[b].tolist() for x in steps], target, decay, uniform_draws(seed, len(steps)))
        assert ours[b] == theirs, b
        assert 3 not in ours[b]


def test_rows_keep_their_own_average() -> None:
    torch.manual_seed(0)
    steps = [torch.randn(3, 30) * 2 for _ in range(6)]
    assert_rows_keep_their_own_state(dk.create("adaptive_p", 0.2, 0.8), steps, [10, 11, 12])


def test_a_negative_target_samples_the_distribution_as_it_is() -> None:
    """llama.cpp's off (its default target is -1): the same tokens as `sample`, from the same seeds."""
    from decodekit_gpt.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=1, n_head=2, n_embd=16)).eval()
    prompts = [[1, 2, 3], [4, 5]]
    off = dk.generate(model, prompts, chain="top_k(20) | adaptive_p(-1)", max_new_tokens=16, seed=4)
    plain = dk.generate(model, prompts, chain="top_k(20) | sample", max_new_tokens=16, seed=4)
    on = dk.generate(model, prompts, chain="top_k(20) | adaptive_p(0.1)", max_new_tokens=16, seed=4)
    assert off.tokens == plain.tokens
    # any negative is off, one past float32's range too (its average started there: a RuntimeError, untyped)
    far = dk.generate(model, prompts, chain="top_k(20) | adaptive_p(-1e300)", max_new_tokens=16, seed=4)
    assert far.tokens == plain.tokens
    assert on.tokens != plain.tokens


def test_the_sampled_tokens_probability_follows_the_target() -> None:
    """What it is for: the sampled tokens' average original probability rises with the target and sits nearer it
    than plain sampling's, the distribution's own sum p^2 (0.359 on these rows; measured 0.039, 0.069, 0.151,
    0.274, 0.533 for the targets below: the steering pulls towards the target, it does not reach it exactly)."""
    x = torch.tensor([[4.0, 3.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.0, 0.0, -1.0]]).expand(2000, -1)
    p = x.softmax(-1)[0]
    plain = float((p * p).sum())
    assert math.isclose(plain, 0.359, abs_tol=0.001)
    averages = []
    for target in (0.05, 0.1, 0.2, 0.3, 0.5):
        ctx = dk.DecodeContext(tokens=torch.zeros(2000, 1, dtype=torch.long), generators=row_generators(0, 2000))
        adaptive = dk.create("adaptive_p", target, 0.5)
        picked = torch.stack([p[adaptive(x, ctx)] for _ in range(20)])  # [20 steps, 2000 rows]
        averages.append(float(picked[5:].mean()))
        assert abs(averages[-1] - target) < abs(plain - target), target
    assert averages == sorted(averages)

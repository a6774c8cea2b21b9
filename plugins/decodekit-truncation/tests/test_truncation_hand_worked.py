"""Hand-worked cases on 4-token distributions (several from llama.cpp's tests/test-sampling.cpp)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest
import torch
from draws import uniform_draws
from torch import Tensor

import decodekit as dk
from decodekit.context import row_generators

P4 = [0.1, 0.2, 0.3, 0.4]
INF = float("-inf")


def logits_of(probs: list[float]) -> Tensor:
    return torch.tensor([probs]).log()


def kept(name: str, probs: list[float], ctx: dk.DecodeContext | None = None, **params: object) -> list[int]:
    out = dk.create(name, **params)(
        logits_of(probs), ctx or dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long))
    )
    return torch.isfinite(out[0]).nonzero().flatten().tolist()


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (0.0, [0, 1, 2, 3]),  # no-op
        (0.24, [0, 1, 2, 3]),  # cut 0.24 * 0.4 = 0.096: 0.1 survives
        (0.26, [1, 2, 3]),  # cut 0.104
        (0.49, [1, 2, 3]),  # cut 0.196
        (0.51, [2, 3]),  # cut 0.204
        (0.76, [3]),  # cut 0.304
        (1.0, [3]),  # only the maximum
    ],
)
def test_min_p_llama_cpp_cases(p: float, expected: list[int]) -> None:
    assert kept("min_p", P4, p=p) == expected


def test_min_p_min_keep_keeps_the_most_probable() -> None:
    assert kept("min_p", P4, p=1.0, min_keep=3) == [1, 2, 3]


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        # logits ln p = [-2.3026, -1.6094, -1.2040, -0.9163]; mean -1.5081;
        # deviations [-0.7945, -0.1013, 0.3041, 0.5918], squares sum 1.0842, /4 = 0.2711, σ = 0.5206.
        (1.0, [2, 3]),  # cut -0.9163 - 0.5206 = -1.4369: keeps -1.2040 and -0.9163 (llama.cpp: 0.4286, 0.5714)
        (1.5, [1, 2, 3]),  # cut -0.9163 - 0.7809 = -1.6972: -1.6094 survives
        (3.0, [0, 1, 2, 3]),  # cut -2.4781: all survive
        (0.0, [0, 1, 2, 3]),  # no-op, as llama.cpp since PR 13345
    ],
)
def test_top_n_sigma_llama_cpp_cases(n: float, expected: list[int]) -> None:
    assert kept("top_n_sigma", P4, n=n) == expected


def test_top_n_sigma_ignores_removed_tokens_in_mean_and_sigma() -> None:
    # The same four tokens plus two already removed: σ and the mean come from the four alone.
    x = torch.tensor([[INF, math.log(0.1), math.log(0.2), INF, math.log(0.3), math.log(0.4)]])
    out = dk.create("top_n_sigma", n=1.0)(x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long)))
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [4, 5]
    # n = 1.35: the cut is -0.9163 - 1.35 * 0.5206 = -1.6191, below ln 0.2 = -1.6094, which stays. Counting the
    # two removed tokens as deviations of 0 would give a mean of -0.3945 and σ = 0.5085 (of x - max): a cut of
    # -1.6028, which would remove it.
    out = dk.create("top_n_sigma", n=1.35)(x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long)))
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [2, 4, 5]


def test_top_n_sigma_is_the_population_sigma_of_the_finite_logits() -> None:
    # finite logits [0, -1, -2, -3]: mean -1.5, population σ = sqrt(1.25) = 1.1180; n = 1.75 cuts at -1.9566,
    # so -2 goes. (Over all six entries, the removed ones as 0 after the shift by the max, σ would be 1.1547 and
    # the cut -2.0207, keeping -2.)
    x = torch.tensor([[0.0, -1.0, INF, -2.0, -3.0, INF]])
    finite = [0.0, -1.0, -2.0, -3.0]
    sigma = statistics.pstdev(finite)
    assert math.isclose(sigma, math.sqrt(1.25))
    expected = [i for i, v in enumerate(x[0].tolist()) if v >= max(finite) - 1.75 * sigma]
    out = dk.create("top_n_sigma", n=1.75)(x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long)))
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == expected == [0, 1]


@pytest.mark.parametrize(
    "row",
    [
        [1.0, 1.0, 1.0, 1.0],  # flat: σ = 0, every token is the maximum
        [INF, 2.0, INF, INF],  # one candidate (after top_k(1), say): σ = 0
    ],
)
def test_top_n_sigma_huge_n_keeps_the_maximum_where_sigma_is_zero(row: list[float]) -> None:
    # Any n keeps x >= max - n·0 = max. n = 1e39 is a valid n past float32's range (inf·0 = NaN).
    out = dk.create("top_n_sigma", n=1e39)(
        torch.tensor([row]), dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long))
    )
    assert torch.equal(out, torch.tensor([row]))


@pytest.mark.parametrize(
    ("a", "expected"),
    [
        # p = [0.05, 0.15, 0.3, 0.5]; p_max² = 0.25
        (0.5, [1, 2, 3]),  # cut 0.125: 0.05 goes
        (1.0, [2, 3]),  # cut 0.25: 0.15 goes
        (0.1, [0, 1, 2, 3]),  # cut 0.025: all stay
    ],
)
def test_top_a(a: float, expected: list[int]) -> None:
    assert kept("top_a", [0.05, 0.15, 0.3, 0.5], a=a) == expected


def test_top_a_min_keep() -> None:
    assert kept("top_a", [0.05, 0.15, 0.3, 0.5], a=1.0, min_keep=3) == [1, 2, 3]


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        # p = [0.4, 0.3, 0.2, 0.1] (llama.cpp's test): every token >= threshold but the least probable goes
        (0.09, [3]),  # all four are top choices; 0.1 is the least of them
        (0.19, [2, 3]),  # 0.4, 0.3, 0.2 are top choices; 0.2 stays
        (0.29, [1, 2, 3]),  # 0.4 and 0.3; 0.3 stays
        (0.39, [0, 1, 2, 3]),  # only 0.4 reaches it: nothing to exclude
        (0.6, [0, 1, 2, 3]),  # threshold > 0.5: never applies
    ],
)
def test_xtc_llama_cpp_cases(threshold: float, expected: list[int]) -> None:
    assert kept("xtc", [0.4, 0.3, 0.2, 0.1], probability=1.0, threshold=threshold) == expected


def test_xtc_a_token_exactly_at_the_threshold_is_a_top_choice() -> None:
    # threshold = the probability of a 10.0 token: ln t + lse = 10 exactly (10 - lse is exact in float32 by
    # Sterbenz' lemma, lse = 11.30 being within a factor 2 of 10, and ln t rounds back to it). Both 10.0s have
    # p >= t, as llama.cpp's `p >= threshold`: three top choices, the least probable (the tied 10.0s) stay and
    # the 10.5 goes. Were p == t not a top choice, the 10.5 alone would be one and nothing would go.
    x = torch.tensor([[10.5, 10.0, 10.0, 5.0]])
    lse = torch.logsumexp(x, -1)
    threshold = math.exp(float(x[0, 1] - lse[0]))
    assert torch.equal(torch.tensor(math.log(threshold), dtype=torch.float32) + lse, x[0, 1:2])
    out = dk.create("xtc", probability=1.0, threshold=threshold)(
        x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long))
    )
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1, 2, 3]


def test_xtc_threshold_zero_keeps_the_least_probable_candidate() -> None:
    # Every candidate is a top choice; the removed token (p = 0) is not one.
    x = torch.tensor([[math.log(0.4), math.log(0.3), INF, math.log(0.2), math.log(0.1)]])
    out = dk.create("xtc", probability=1.0, threshold=0.0)(
        x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long))
    )
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [4]


def test_xtc_min_keep() -> None:
    # threshold 0.09 would leave one token; min_keep 2 forbids it. threshold 0.19 leaves two: allowed.
    assert kept("xtc", [0.4, 0.3, 0.2, 0.1], probability=1.0, threshold=0.09, min_keep=2) == [0, 1, 2, 3]
    assert kept("xtc", [0.4, 0.3, 0.2, 0.1], probability=1.0, threshold=0.19, min_keep=2) == [2, 3]


@pytest.mark.parametrize(
    ("threshold", "special", "expected"),
    [
        # mlx-lm's xtc_special_tokens: never removed, still top choices (p = [0.4, 0.3, 0.2, 0.1])
        (0.19, [0], [0, 2, 3]),  # 0.4 is special: only 0.3 goes; 0.2 is still the least top choice
        (0.09, [3], [3]),  # the least top choice is special anyway
        (0.19, [2], [2, 3]),  # the least top choice is special: 0.4 and 0.3 go as without it
        (0.29, [0, 1], [0, 1, 2, 3]),  # the only removable top choice would be 0.4: special, so no change
    ],
)
def test_xtc_special_tokens_are_never_removed(threshold: float, special: list[int], expected: list[int]) -> None:
    assert kept("xtc", [0.4, 0.3, 0.2, 0.1], probability=1.0, threshold=threshold, special_tokens=special) == expected


def test_xtc_special_tokens_count_for_min_keep() -> None:
    # Without the special token 0.4 would go and min_keep 4 forbids it; 0.4 special, only 0.3 goes: 3 left.
    kw: dict[str, Any] = {"probability": 1.0, "threshold": 0.19}
    assert kept("xtc", [0.4, 0.3, 0.2, 0.1], min_keep=3, special_tokens=[0], **kw) == [0, 2, 3]
    assert kept("xtc", [0.4, 0.3, 0.2, 0.1], min_keep=4, special_tokens=[0], **kw) == [0, 1, 2, 3]


def test_xtc_special_token_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(dk.ParameterError, match=r"special_tokens holds token id 4, .* 0 <= token id < 4"):
        kept("xtc", [0.4, 0.3, 0.2, 0.1], probability=0.0, special_tokens=[1, 4])


def test_xtc_applies_per_row_with_the_rows_own_draw() -> None:
    # Two identical rows, probability 0.5: a row applies XTC iff its own draw u < 0.5.
    seeds = list(range(50))
    low = next(s for s in seeds if uniform_draws(s, 1)[0] < 0.5)  # this row's draw applies XTC
    high = next(s for s in seeds if uniform_draws(s, 1)[0] >= 0.5)  # this one's does not
    x = logits_of([0.4, 0.3, 0.2, 0.1]).expand(2, -1)
    gens = row_generators([low, high], 2)
    ctx = dk.DecodeContext(tokens=torch.zeros(2, 1, dtype=torch.long), generators=gens)
    out = dk.create("xtc", probability=0.5, threshold=0.19)(x, ctx)
    assert torch.isfinite(out).tolist() == [[False, False, True, True], [True, True, True, True]]


def test_xtc_draw_does_not_depend_on_other_rows() -> None:
    x = torch.randn(6, 50) * 3
    alone = [
        dk.create("xtc", probability=0.5, threshold=0.05)(
            x[b : b + 1],
            dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long), generators=row_generators([b], 1)),
        )
        for b in range(6)
    ]
    ctx = dk.DecodeContext(tokens=torch.zeros(6, 1, dtype=torch.long), generators=row_generators(list(range(6)), 6))
    together = dk.create("xtc", probability=0.5, threshold=0.05)(x, ctx)
    assert torch.equal(together, torch.cat(alone))


def test_typical_llama_cpp_cases() -> None:
    # p = [0.4, 0.2, 0.2, 0.2]: H = -(0.4 ln 0.4 + 3 * 0.2 ln 0.2) = 1.3322 nats;
    # |-ln p - H| = [|0.9163 - 1.3322|, |1.6094 - 1.3322|] = [0.4159, 0.2772]: the three 0.2s are
    # more typical than 0.4; their mass reaches 0.5 at the third, so the 0.4 token goes.
    assert kept("typical", [0.4, 0.2, 0.2, 0.2], mass=0.5) == [1, 2, 3]
    # p = [0.97, 0.01, 0.01, 0.01]: H = 0.1677; |0.0305 - 0.1677| = 0.137 < |4.605 - 0.1677|: 0.97 alone.
    assert kept("typical", [0.97, 0.01, 0.01, 0.01], mass=0.5) == [0]


def test_typical_stops_at_the_token_whose_cumulative_mass_equals_mass() -> None:
    # p = [0.125, 0.125, 0.25, 0.5]: H = 1.75 ln 2 nats; |-ln p - H| = [1.25, 1.25, 0.25, 0.75] · ln 2. By
    # typicality: the 0.25, the 0.5, then the 0.125s; cumulative mass 0.25, 0.75, 0.875, 1. A mass of exactly
    # their first two (as float32 sums them) is reached at the 0.5 (HF: the first position whose cumulative mass
    # is >= mass), so the 0.125s go; a float32 step more mass needs them.
    probs = [0.125, 0.125, 0.25, 0.5]
    p = logits_of(probs).log_softmax(-1).exp()[0]
    mass = float(p[2] + p[3])
    assert math.isclose(mass, 0.75, rel_tol=1e-6)
    assert kept("typical", probs, mass=mass) == [2, 3]
    more = float(torch.nextafter(torch.tensor(mass), torch.tensor(1.0)))
    assert kept("typical", probs, mass=more) == [0, 1, 2, 3]


def test_typical_min_keep_keeps_the_tokens_tied_with_the_last_kept() -> None:
    # p = [0.5, 0.2, 0.15, 0.15]: H = 0.3466 + 0.3219 + 2 * 0.2846 = 1.2377 nats;
    # d = |-ln p - H| = [0.5446, 0.3718, 0.6594, 0.6594]. mass 0.1 is reached by the 0.2 alone;
    # min_keep 3 adds the 0.5 and the third most typical, a 0.15, which is tied with the other 0.15.
    assert kept("typical", [0.5, 0.2, 0.15, 0.15], mass=0.1, min_keep=3) == [0, 1, 2, 3]
    assert kept("typical", [0.5, 0.2, 0.15, 0.15], mass=0.1, min_keep=2) == [0, 1]

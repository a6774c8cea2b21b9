"""Hand-worked cases on 4-token distributions (several from llama.cpp's tests/test-sampling.cpp)."""

from __future__ import annotations

import math
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


def test_typical_min_keep_keeps_the_tokens_tied_with_the_last_kept() -> None:
    # p = [0.5, 0.2, 0.15, 0.15]: H = 0.3466 + 0.3219 + 2 * 0.2846 = 1.2377 nats;
    # d = |-ln p - H| = [0.5446, 0.3718, 0.6594, 0.6594]. mass 0.1 is reached by the 0.2 alone;
    # min_keep 3 adds the 0.5 and the third most typical, a 0.15, which is tied with the other 0.15.
    assert kept("typical", [0.5, 0.2, 0.15, 0.15], mass=0.1, min_keep=3) == [0, 1, 2, 3]
    assert kept("typical", [0.5, 0.2, 0.15, 0.15], mass=0.1, min_keep=2) == [0, 1]

"""`max_new_tokens` per prompt (vLLM's per-request max_tokens): each prompt gets exactly what it gets alone with its
own int, and a bad list is refused naming it."""

from __future__ import annotations

from typing import Any

import pytest

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
LIMITS = [3, 7, 0, 5]
SEEDS = [11, 12, 13, 14]


@pytest.fixture(scope="module")
def model() -> TinyLM:
    return TinyLM(64)


@pytest.mark.parametrize("chain", [None, "greedy", "top_k(5) | temperature(0.8)"])
def test_each_prompt_gets_what_it_gets_alone_with_its_own_limit(model: TinyLM, chain: str | None) -> None:
    out = dk.generate(model, PROMPTS, max_new_tokens=LIMITS, seed=SEEDS, chain=chain, stop_tokens=[])
    for b, (prompt, limit, seed) in enumerate(zip(PROMPTS, LIMITS, SEEDS)):
        alone = dk.generate(model, [prompt], max_new_tokens=limit, seed=[seed], chain=chain, stop_tokens=[])
        assert out.tokens[b] == alone.tokens[0]
        assert len(out.tokens[b]) == limit  # no stop tokens: every row runs to its own length
        assert out.finish_reasons[b] == alone.finish_reasons[0] == "length"


def test_streamed_rows_end_at_their_own_limits(model: TinyLM) -> None:
    counts = [0] * len(PROMPTS)
    for event in dk.stream(model, PROMPTS, max_new_tokens=LIMITS, seed=SEEDS, stop_tokens=[]):
        counts[event.row] += 1
    assert counts == LIMITS


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ([3, 7, 0], r"max_new_tokens: 3 limits given for 4 prompts; allowed: one int, or one per prompt"),
        ([3, 7, -1, 5], r"max_new_tokens\[2\]=-1 is invalid; allowed: an integer >= 0"),
        ([3, 7, "x", 5], r"max_new_tokens\[2\]='x' is invalid"),
    ],
)
def test_a_bad_list_is_refused_naming_it(model: TinyLM, limits: list[Any], message: str) -> None:
    for call in (dk.validate, dk.generate):
        with pytest.raises(dk.ParameterError, match=message):
            call(model, PROMPTS, max_new_tokens=limits)


def test_validate_keeps_the_largest_for_sizing_and_each_prompts_own(model: TinyLM) -> None:
    request = dk.validate(model, PROMPTS, max_new_tokens=LIMITS)
    assert request.max_new_tokens == 7
    assert [request.limit(b) for b in range(4)] == LIMITS
    assert dk.validate(model, PROMPTS, max_new_tokens=4).limit(3) == 4


def test_the_same_prompt_twice_keeps_each_rows_limit(model: TinyLM) -> None:
    """Rows are the prompts given: the same prompt twice, with the same seed, ends at each one's own limit."""
    out = dk.generate(model, [[1, 2], [1, 2]], max_new_tokens=[2, 6], seed=[5, 5], stop_tokens=[])
    assert [len(t) for t in out.tokens] == [2, 6]
    assert out.tokens[1][:2] == out.tokens[0]

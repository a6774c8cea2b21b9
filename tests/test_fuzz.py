"""The fuzz test: a few hundred fixed cases (hypothesis, derandomized) of every target, every
property asserted; `make fuzz` runs 10,000+ and counts the outcomes instead (benchmarks/fuzz.py).

DECODEKIT_FUZZ_SCALE=10 runs ten times as many cases here.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch import Tensor

import decodekit as dk
from decodekit.testing.fuzz import (
    ACCEPTED,
    TARGETS,
    Report,
    chain_cases,
    check_logits,
    generate_cases,
    memory_limit,
    run_case,
    spec_cases,
)
from decodekit.testing.fuzz.chains import check_tokens
from decodekit.testing.fuzz.inputs import History, Logits, Row
from decodekit.testing.fuzz.outcomes import MUTATED, REVIVED, UNFLAGGED, UNTYPED, exception_finding

settings.register_profile(
    "decodekit-fuzz",
    derandomize=True,  # the same cases on every run: a failure here is a regression, never luck
    database=None,
    deadline=None,  # two shared cores: a slow case is not a failure
    suppress_health_check=list(HealthCheck),  # a new plugin's sampler may draw large: not a failure of the code
)
FUZZ = settings.get_profile("decodekit-fuzz")
SCALE = float(os.environ.get("DECODEKIT_FUZZ_SCALE", "1"))


def _examples(n: int) -> int:
    return max(1, round(n * SCALE))


def _assert_holds(target: str, case: Any) -> None:
    with memory_limit():
        outcomes = run_case(TARGETS[target], case)
    failures = [str(f) for f in outcomes if f.kind not in ACCEPTED]
    assert not failures, f"{'; '.join(failures)}\n{case!r}"


@given(chain_cases())
@settings(FUZZ, max_examples=_examples(300))
def test_chains_on_adversarial_logits(case: Any) -> None:
    _assert_holds("chains", case)


@given(spec_cases())
@settings(FUZZ, max_examples=_examples(100))
def test_chain_strings_and_specs(case: Any) -> None:
    _assert_holds("specs", case)


@given(generate_cases())
@settings(FUZZ, max_examples=_examples(100))
def test_generate_and_stream(case: Any) -> None:
    _assert_holds("generate", case)


# -- the harness itself: a broken stage is caught ---------------------------------------


def _findings(processor: Any, selector: Any = None) -> set[str]:
    x = Logits((Row(removed=0.5), Row(removed=1.0)), vocab_size=8).tensor()
    report = Report()
    chain = dk.Chain([processor] if processor else [], selector=selector or dk.create("sample"))
    check_logits(chain, x, History(2, 3, 8).context(), report)
    return {f.kind for f in report.findings}


def test_a_processor_that_revives_removed_tokens_is_caught() -> None:
    assert REVIVED in _findings(lambda x, ctx: x.nan_to_num())


def test_a_processor_that_writes_into_its_input_is_caught() -> None:
    assert MUTATED in _findings(lambda x, ctx: x.mul_(1.0).add_(1.0))


def test_a_selector_that_picks_a_removed_token_is_caught() -> None:
    assert REVIVED in _findings(None, lambda x, ctx: torch.isneginf(x).int().argmax(-1))


def test_a_token_for_a_row_with_nothing_left_is_caught() -> None:
    report = Report()
    check_tokens(torch.tensor([0, 1]), torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]), report, "selector")
    assert {f.kind for f in report.findings} == {UNFLAGGED}


def test_an_untyped_exception_is_blamed_on_the_module_that_raised_it() -> None:
    def crash(x: Tensor) -> float:
        return math.log(-float(x.sum()) - 1.0)  # log of a negative number: ValueError

    with pytest.raises(ValueError) as info:
        crash(torch.ones(2))
    finding = exception_finding(info.value)
    assert finding.kind == UNTYPED and finding.detail.startswith("ValueError at ")
    assert exception_finding(dk.ParameterError("x")).kind in ACCEPTED


def test_half_logits_are_checked_in_float32_as_the_chain_runs_them() -> None:
    """The chain's step and process run float16 in float32; the harness ran it in float16 and saw the step's
    token 114 as one "chain.process removed" (which kept 25)."""
    torch.manual_seed(3)
    x = (torch.randn(1, 130) * 1e-3).half()
    report = Report()
    check_logits(dk.Chain.parse("temperature(7549) | temperature(0) | greedy"), x, History(1, 3, 130).context(), report)
    assert report.findings == []

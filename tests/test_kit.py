"""Every check of the sampler conformance kit fails on a stage broken in the way it checks for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_greedy.greedy import Greedy
from decodekit_top_k.top_k import TopK
from torch import Tensor

import decodekit as dk
from decodekit.candidates import keep_at_least, top_candidates
from decodekit.stage import Candidates
from decodekit.testing import NEG, ProcessorConformance, SelectorConformance, check_processor, check_selector
from decodekit.testing.selectors import check_selector_distribution

# -- broken processors (each a TopK(k=3) but for one flaw) ------------------------------------


class ChangesShape(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return super().__call__(logits, ctx)[:, :-1]


class ChangesDtypeInHalfPrecision(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return super().__call__(logits.float(), ctx)  # right for float32 only


class ModifiesInput(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits.masked_fill_(logits < logits.topk(3).values[:, -1:], NEG)


class RevivesRemoved(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return torch.nan_to_num(logits, neginf=-1e4)


class MakesNan(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return torch.where(logits > 5, float("nan"), logits)


class NotRepeatable(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits + torch.rand(()).to(logits.dtype)  # the global generator, not the row's


class DependsOnOtherRows(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits - logits.masked_fill(logits == NEG, 0).mean()  # the batch's mean


def assuming_contiguous(logits: Tensor) -> Tensor:
    """`logits` read as if laid out row by row: wrong for a strided view."""
    return logits.as_strided(logits.shape, (logits.shape[1], 1))


class FailsOnAView(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return super().__call__(assuming_contiguous(logits).clone(), ctx)


class CandidatesDisagree(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        values, ids = logits.topk(4)  # one token too many
        return Candidates(values, ids)


class MarksContinuousRows(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        values, ids = logits.topk(3)
        return Candidates(torch.full_like(values, float("nan")), ids)  # never holds anything


class OnCandidatesDisagree(TopK):
    def on_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Candidates:
        return c  # forgets to truncate


class IgnoresTiesPastTheCandidates(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        c, _bound = top_candidates(logits, 2 * self.params.k)
        kth = c.values[:, self.params.k - 1 : self.params.k]
        return keep_at_least(c, kth, torch.ones_like(kth, dtype=torch.bool))  # held everywhere: ties are cut off


class BadSpec(TopK):
    def spec(self) -> dict[str, Any]:
        return {"name": "top_k", "params": {"k": self.params.k + 1}}


PROCESSOR_FLAWS: list[tuple[type[TopK], str]] = [
    (ChangesShape, "output shape"),
    (ChangesDtypeInHalfPrecision, "output dtype"),
    (ModifiesInput, "modified its input in place"),
    (RevivesRemoved, "revived removed"),
    (MakesNan, "produced NaN"),
    (NotRepeatable, "a second call on the same input"),
    (DependsOnOtherRows, "alone vs in a batch"),
    (FailsOnAView, "strided view"),
    (CandidatesDisagree, "to_candidates"),
    (MarksContinuousRows, "NaN on continuous logits"),
    (OnCandidatesDisagree, "on_candidates"),
    (IgnoresTiesPastTheCandidates, "to_candidates"),
    (BadSpec, "rebuilt from its spec"),
]


# -- broken selectors (each a Greedy but for one flaw) ------------------------------------------


class PicksRemoved(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits.argmin(-1)


class OutOfRange(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return super().__call__(logits, ctx) + logits.shape[-1]


class UsesTheGlobalGenerator(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        noise = torch.rand(logits.shape).log().neg().log().neg()  # not the rows' generators
        return (logits.float() + noise).argmax(-1)


class SelectorFailsOnAView(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return assuming_contiguous(logits).argmax(-1)


class SelectCandidatesDisagree(Greedy):
    def select_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Tensor:
        return c.indices[:, -1]


class FirstCandidateOfTiedMaxima(Greedy):
    def select_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Tensor:
        return c.indices[:, 0]  # the largest value, but among tied maxima not the lowest id argmax picks


class FailsOnUnsampleableRows(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        if bool(torch.isnan(logits).any()):
            raise RuntimeError("index out of bounds")  # as mirostat_v2 did
        return super().__call__(logits, ctx)


SELECTOR_FLAWS: list[tuple[type[Greedy], str]] = [
    (PicksRemoved, "picked a removed"),
    (OutOfRange, "outside"),
    (UsesTheGlobalGenerator, "the same seeds gave|alone but|rows reversed pick"),
    (SelectorFailsOnAView, "strided view"),
    (SelectCandidatesDisagree, "select_candidates"),
    (FirstCandidateOfTiedMaxima, "select_candidates"),
    (FailsOnUnsampleableRows, "cannot be sampled: raised"),
]


# -- every flaw is caught: the check passes the stage it breaks and fails the broken one ---------

# Each flaw as (the check, the stage it breaks, the broken stage, what the check's failure says).
FLAWS = [
    *[pytest.param(check_processor, TopK(k=3), c(k=3), m, id=c.__name__) for c, m in PROCESSOR_FLAWS],
    *[pytest.param(check_selector, Greedy(), c(), m, id=c.__name__) for c, m in SELECTOR_FLAWS],
]


@pytest.mark.parametrize(("check", "sound", "broken", "message"), FLAWS)
def test_the_checks_catch(check: Callable[[Any], None], sound: Any, broken: Any, message: str) -> None:
    check(sound)  # the stage it breaks passes
    with pytest.raises(AssertionError, match=message):
        check(broken)


def test_the_distribution_check_catches_a_wrong_distribution() -> None:
    def uniform_over_kept(logits: Tensor) -> Tensor:
        kept = torch.isfinite(logits).double()
        return kept / kept.sum()

    with pytest.raises(AssertionError, match="do not fit"):
        check_selector_distribution(dk.create("sample"), uniform_over_kept)


def test_the_distribution_check_takes_probabilities_summing_to_one_within_its_tolerance() -> None:
    """float32 probabilities sum to 1 only to ~1e-7 (0.9 + 0.1 is 1 - 2e-8): the kit accepts a sum
    within 1e-6 of 1, where scipy's chisquare alone raises a ValueError beyond 1.5e-8."""

    def softmax_off_by_5e_7(logits: Tensor) -> Tensor:
        return torch.softmax(logits.double(), -1) * (1 + 5e-7)

    check_selector_distribution(dk.create("sample"), softmax_off_by_5e_7)


# -- the pytest suites: every dtype, and hooks a stage lacks are skipped --------------------


def outcome(test: Callable[[], None]) -> str:
    try:
        test()
    except pytest.skip.Exception:
        return "skipped"
    except AssertionError:
        return "failed"
    return "passed"


def test_the_suites_check_every_float_dtype() -> None:
    class Suite(ProcessorConformance):
        def make(self) -> TopK:
            return ChangesDtypeInHalfPrecision(k=3)

    class Float32Only(Suite):
        dtypes = (torch.float32,)

    assert outcome(Suite().test_contract_and_rows_independent) == "failed"
    assert outcome(Float32Only().test_contract_and_rows_independent) == "passed"


def test_hooks_a_stage_does_not_implement_are_skipped_not_passed() -> None:
    def plain(logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits

    class Processor(ProcessorConformance):
        def make(self) -> Callable[[Tensor, dk.DecodeContext], Tensor]:
            return plain

    class Selector(SelectorConformance):
        def make(self) -> Callable[[Tensor, dk.DecodeContext], Tensor]:
            return lambda logits, ctx: logits.argmax(-1)

    assert outcome(Processor().test_candidates_agree_with_dense) == "skipped"
    assert outcome(Selector().test_candidates_agree_with_dense) == "skipped"
    assert outcome(Selector().test_distribution) == "skipped"
    assert outcome(Processor().test_contract_and_rows_independent) == "passed"

"""Every check of the sampler conformance kit fails on a stage broken in the way it checks for."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_greedy.greedy import Greedy
from decodekit_top_k.top_k import TopK
from torch import Tensor

import decodekit as dk
from decodekit.candidates import keep_at_least, top_candidates
from decodekit.sample import Sample
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


class OnCandidatesModifiesInput(TopK):
    def on_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Candidates:
        out = super().on_candidates(Candidates(c.values.clone(), c.indices.clone()), ctx)
        c.values.zero_()  # scribbles on its input after the work (the kit compared its input with itself)
        return out


class IgnoresTiesPastTheCandidates(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        c, _bound = top_candidates(logits, 2 * self.params.k)
        kth = c.values[:, self.params.k - 1 : self.params.k]
        return keep_at_least(c, kth, torch.ones_like(kth, dtype=torch.bool))  # held everywhere: ties are cut off


class ReadsAValue(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        logits.amax().item()  # a host read, whatever it is for
        return super().to_candidates(logits, ctx)


class BranchesOnAValue(TopK):
    def on_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Candidates:
        if bool(torch.isnan(c.values).any()):  # a host read: an `if` on a tensor
            return c
        return super().on_candidates(c, ctx)


class PrintsTheLogits(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        print(logits.amax(-1))  # a host read too
        return super().to_candidates(logits, ctx)


class ReadsTheHistory(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        return super().to_candidates(logits, ctx) if int(ctx.tokens.max()) >= 0 else None  # the history is device data


class KeepsAValueDependentShape(TopK):
    def to_candidates(self, logits: Tensor, ctx: dk.DecodeContext) -> Candidates | None:
        assert logits[logits > NEG].numel() > 0  # a boolean mask: its shape depends on the values
        return super().to_candidates(logits, ctx)


class BadSpec(TopK):
    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "params": {"k": self.params.k + 1}}


PROCESSOR_FLAWS: list[tuple[type[TopK], str]] = [
    (ChangesShape, "output shape"),
    (ChangesDtypeInHalfPrecision, "output dtype"),
    (
        ModifiesInput,
        "modified its input in place; allowed: a new tensor .out-of-place ops: masked_fill, not masked_fill_",
    ),
    (RevivesRemoved, "revived removed"),
    (MakesNan, "produced NaN"),
    (NotRepeatable, r"a second call on the same input and seeds \(draws from .*never torch's global one\)"),
    (DependsOnOtherRows, "alone vs in a batch"),
    (FailsOnAView, "strided view"),
    (CandidatesDisagree, "to_candidates"),
    (MarksContinuousRows, "NaN on continuous logits"),
    (OnCandidatesDisagree, "on_candidates"),
    (OnCandidatesModifiesInput, "on_candidates on .*: modified the input candidates in place; allowed: a new tensor"),
    (IgnoresTiesPastTheCandidates, "to_candidates"),
    (BadSpec, "rebuilt from its spec"),
    (ReadsAValue, r"to_candidates on .* logits: reads back .* \(\.item\(\) .* at test_kit\.py:\d+: logits\.amax"),
    (BranchesOnAValue, r"on_candidates on .*: reads back .* \(bool\(\) of a tensor .* at test_kit\.py:\d+: if bool"),
    (PrintsTheLogits, r"to_candidates on .*: reads back .* \(printing a tensor at test_kit\.py"),
    (ReadsTheHistory, r"reads back .* \(int\(\) of a tensor at test_kit\.py"),
    (KeepsAValueDependentShape, r"reads back .* \(a shape that depends on values \(aten\.nonzero"),
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


class SelectorReadsAValue(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        logits.amax().item()  # a host read, whatever it is for
        return super().__call__(logits, ctx)


class SelectCandidatesReadsBack(Greedy):
    def select_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Tensor:
        picked = super().select_candidates(c, ctx)
        return torch.tensor(picked.tolist())  # a round trip through the host


SELECTOR_FLAWS: list[tuple[type[Greedy], str]] = [
    (PicksRemoved, "picked a removed"),
    (OutOfRange, "outside"),
    (UsesTheGlobalGenerator, "(the same seeds gave|alone but).*; allowed: .*never torch's global one"),
    (SelectorFailsOnAView, "strided view"),
    (SelectCandidatesDisagree, "select_candidates"),
    (FirstCandidateOfTiedMaxima, "select_candidates"),
    (FailsOnUnsampleableRows, "cannot be sampled: raised"),
    (
        SelectorReadsAValue,
        r"selector_reads_a_value\(\) on .* logits: reads back .* \(\.item\(\) or \.tolist\(\) at test_kit\.py",
    ),
    (SelectCandidatesReadsBack, r"select_candidates on .* candidates: reads back .* at test_kit\.py:\d+: return"),
]


# -- every flaw is caught: the check passes the stage it breaks and fails the broken one ---------

# Each flaw as (the check, the stage it breaks, the broken stage, what the check's failure says).
FLAWS = [
    *[pytest.param(check_processor, TopK(k=3), c(k=3), m, id=c.__name__) for c, m in PROCESSOR_FLAWS],
    *[pytest.param(check_selector, Greedy(), c(), m, id=c.__name__) for c, m in SELECTOR_FLAWS],
]


@pytest.mark.parametrize(("check", "sound", "broken", "message"), FLAWS)
def test_the_checks_catch(check: Callable[[Any], None], sound: Any, broken: Any, message: str) -> None:
    # A stage drawing from the global generator is caught by whichever check first sees two draws differ: which one
    # depends on the generator's state, so it is fixed here (a random test order met the strided-view check first).
    torch.manual_seed(0)
    check(sound)  # the stage it breaks passes
    with pytest.raises(AssertionError, match=message):
        check(broken)


def test_a_print_is_placed_in_the_stage_not_in_a_library_that_wraps_print(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's progress bars replace `builtins.print` with a wrapper of their own: the kit said the stage printed a
    tensor "at tqdm_ray.py:50: _print(*args, **kwargs)" (CI met it when a Ray test ran first in the worker)."""
    library: dict[str, Any] = {"__name__": "progress_lib", "_print": builtins.print}
    exec(compile("def print(*args, **kwargs):\n    _print(*args, **kwargs)\n", "progress_lib.py", "exec"), library)
    monkeypatch.setattr(builtins, "print", library["print"])
    with pytest.raises(AssertionError, match=r"printing a tensor at test_kit\.py:\d+: print\(logits"):
        check_processor(PrintsTheLogits(k=3))


def test_the_distribution_check_catches_a_wrong_distribution() -> None:
    def uniform_over_kept(logits: Tensor) -> Tensor:
        kept = torch.isfinite(logits).double()
        return kept / kept.sum()

    with pytest.raises(AssertionError, match="do not fit"):
        check_selector_distribution(dk.create("sample"), uniform_over_kept)


class StatesSoftmaxDrawsColder(dk.SelectorBase[dk.NoParams]):
    """Promises speculative decoding draws from softmax(logits), but draws from softmax(2 * logits)."""

    distribution = "softmax"

    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return Sample()(2 * logits, ctx)


def suite_distribution(selector: Any) -> None:
    """The pytest suite's chi-square test, with no distribution() of its own."""

    class Suite(SelectorConformance):
        def make(self) -> Any:
            return selector

    Suite().test_distribution()


@pytest.mark.parametrize("check", [check_selector, suite_distribution])
def test_a_selector_is_held_to_the_distribution_it_states(check: Callable[[Any], None]) -> None:
    """Without the suite's distribution(), the chi-square test was skipped: a selector stating "softmax" that drew
    otherwise passed the kit, and speculative decoding, trusting the attribute, sampled from the wrong distribution."""
    check(Greedy())  # distribution = "argmax", and it is
    with pytest.raises(AssertionError, match="do not fit .*; allowed: draws as its distribution = 'softmax' states"):
        check(StatesSoftmaxDrawsColder())


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


# -- host reads: a decode step reads nothing back from the device ------------------------------


def test_a_processor_calling_item_fails_the_kit_unless_it_says_why() -> None:
    """The contract always said "no host reads"; a processor calling `.item()` once passed every test."""

    def copies(logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits.clone()

    def copies_after_a_read(logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        return logits.clone() if logits.amax().item() < float("inf") else logits

    check_processor(copies)
    with pytest.raises(AssertionError, match=r"reads back from the device .*\(\.item\(\) .* at test_kit\.py:\d+"):
        check_processor(copies_after_a_read)
    check_processor(copies_after_a_read, reads_back="for this test")

    class Suite(ProcessorConformance):
        def make(self) -> Callable[[Tensor, dk.DecodeContext], Tensor]:
            return copies_after_a_read

    class Declared(Suite):
        reads_back = "for this test"

    assert outcome(Suite().test_reads_nothing_back) == "failed"
    assert outcome(Declared().test_reads_nothing_back) == "skipped"  # with its reason, never passed
    assert outcome(Suite().test_contract_and_rows_independent) == "passed"  # the other checks do not see it


STANDARD: dict[str, dict[str, Any]] = {
    "temperature": {"value": 0.7},
    "top_k": {"k": 3},
    "top_p": {"p": 0.9},
    "repetition_penalty": {"penalty": 1.3},
    "frequency_penalty": {"penalty": 0.7},
    "presence_penalty": {"penalty": -0.7, "last_n": 2},
    "no_repeat_ngram": {"ngram_size": 2},
    "logit_bias": {"bias": {0: -3.0, 2: 1.5}},
    "sequence_bias": {"biases": [[[1], 0.5], [[0, 2], -2.0]]},
    "bad_words": {"sequences": [[5], [0, 1]]},
    "allowed_tokens": {"tokens": [0, 2, 3]},  # once int(self._ids[-1]) each step
    "min_new_tokens": {"n": 5, "stop_tokens": [0, 4]},  # the same
    "exponential_decay": {"start": 1, "factor": 1.5, "stop_tokens": [0, 4]},
    "min_p": {"p": 0.1},
    "typical": {"mass": 0.9},
    "epsilon": {"epsilon": 0.01},
    "eta": {"epsilon": 0.01},
    "top_n_sigma": {"n": 1.0},
    "top_a": {"a": 0.2},
    "top_h": {"h": 0.5},
    "xtc": {"threshold": 0.1, "probability": 0.5},
    "dynamic_temperature": {"temp": 1.0, "delta": 0.5},
    "sample": {},
    "greedy": {},
    "gumbel": {},
    "mirostat": {"tau": 3.0, "eta": 0.1},
    "mirostat_v2": {},
    "adaptive_p": {"target": 0.3},
}


@pytest.mark.parametrize("name", STANDARD)
def test_the_standard_samplers_read_nothing_back(name: str) -> None:
    """`dry` alone reads the history back (declared in its own tests: its repeat search is as long as the repeat)."""
    from decodekit.testing.processors import check_processor_reads_nothing
    from decodekit.testing.selectors import check_selector_reads_nothing
    from decodekit.testing.suite import KitSettings, each_fake_case

    stage = dk.create(name, **STANDARD[name])
    kind = dk.get_registry().samplers[name].kind
    check = check_selector_reads_nothing if kind == "selector" else check_processor_reads_nothing
    each_fake_case(KitSettings(vocab_size=6), lambda x, h, f: check(stage, x, h, f))


@pytest.mark.parametrize("cache", ["h2o", "tova", "snapkv"])
def test_the_tiny_model_hands_its_queries_to_a_cache_that_observes(cache: str) -> None:
    """TinyLM decodes "through any cache": a scored cache that is never handed its queries refuses the next
    forward (found by the compose fuzz). With room for the whole text nothing is evicted: dense's tokens."""
    from decodekit.testing.tiny_lm import TinyLM

    model, prompts = TinyLM(40, n_kv_heads=1), [[1, 2, 3], [4, 5]]
    scored = dk.generate(
        model, prompts, chain="greedy", max_new_tokens=6, cache=f"{cache}(budget=12, sinks=1, recent=1)"
    )
    assert scored.tokens == dk.generate(model, prompts, chain="greedy", max_new_tokens=6).tokens

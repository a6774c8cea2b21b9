"""The fuzz test: a few hundred fixed cases (hypothesis, derandomized) of every target, every
property asserted; `make fuzz` runs 10,000+ and counts the outcomes instead (benchmarks/fuzz.py).

DECODEKIT_FUZZ_SCALE=10 runs ten times as many cases here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch import Tensor

import decodekit as dk
from decodekit.results import Generation
from decodekit.testing.fuzz import (
    ACCEPTED,
    TARGETS,
    Report,
    chain_cases,
    check_logits,
    compose,
    generate_cases,
    memory_limit,
    rowlimits,
    run_case,
    spec_cases,
)
from decodekit.testing.fuzz.chains import check_tokens
from decodekit.testing.fuzz.compose import (
    CacheDraw,
    ComposeCase,
    _compare,
    check_compose_case,
    compose_cases,
    compose_model,
)
from decodekit.testing.fuzz.generation import Arg, ModelKey, check_prompt_scores, check_result, tiny_model
from decodekit.testing.fuzz.inputs import History, Logits, Row
from decodekit.testing.fuzz.outcomes import (
    CACHE_MISMATCH,
    MALFORMED,
    MISMATCH,
    MUTATED,
    REVIVED,
    ROW_MISMATCH,
    UNFLAGGED,
    UNTYPED,
    exception_finding,
)
from decodekit.testing.fuzz.rowlimits import RowLimitsCase, _compare_alone, check_row_limits_case, row_limits_cases

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


def _holds_on(target: str, cases: Any, examples: int) -> Callable[..., None]:
    """A test that runs `examples` of the target's drawn cases (times DECODEKIT_FUZZ_SCALE), each holding."""

    @given(cases)
    @settings(FUZZ, max_examples=_examples(examples))
    def test(case: Any) -> None:
        _assert_holds(target, case)

    held: Callable[..., None] = test  # hypothesis's decorators are untyped
    return held


test_chains_on_adversarial_logits = _holds_on("chains", chain_cases(), 300)
test_chain_strings_and_specs = _holds_on("specs", spec_cases(), 100)
test_generate_and_stream = _holds_on("generate", generate_cases(), 100)
test_max_new_tokens_per_prompt = _holds_on("rowlimits", row_limits_cases(), 100)
test_strategies_caches_chains_and_options_composed = _holds_on("compose", compose_cases(), 100)


_ROPE = ModelKey(7, position="rope")


@pytest.mark.parametrize(
    "case",
    [
        # beam over xtc | top_k: a dead beam's row came back NaN from Chain.distribution, and beam closed the prompt
        # with no hypothesis (PluginError "ended after 0 tokens")
        ComposeCase(
            ModelKey(7),
            "beam",
            {"num_beams": 3, "length_penalty": 1.0, "early_stopping": False},
            CacheDraw(
                "streaming", {"budget": 13, "sinks": 2, "recent": 0, "slack": 3, "store": "dense", "prefill_only": True}
            ),
            "xtc(threshold=0.1, probability=0.5) | presence_penalty(0.5) | top_k(3) | greedy",
            ((3, 4), (2,)),
            4,
            222350,
            {"prompt_logprobs": 0, "stop_tokens": [3, 4]},
        ),
        # scored caches that observe on the kit's TinyLM: refused at the second forward (PluginError) before
        ComposeCase(
            _ROPE,
            "sample",
            {},
            CacheDraw(
                "h2o", {"budget": 12, "sinks": 1, "recent": 1, "slack": 2, "store": "gqa", "prefill_only": False}
            ),
            "repetition_penalty(1.3) | greedy",
            ((1, 2, 3), (4,)),
            5,
            (7, 8),
            {"logprobs": 2},
        ),
        ComposeCase(
            _ROPE,
            "speculative",
            {"draft": "model", "k": 2, "ngram_size": 2},
            CacheDraw("window", {"size": 12, "sinks": 2, "slack": 3, "store": "gqa"}),
            "greedy",
            ((1, 2, 3), (4, 5, 6)),
            6,
            None,
        ),
        # a prefill_only draft cache after a 1-token prompt: RuntimeError (a mask of 10 slots against 22 keys) before;
        # the draft fed the prompt's last token apart (padding alone first), crop_rows took every later token back,
        # and the next forward was compressed as a second prompt
        ComposeCase(
            ModelKey(40, position="rope", n_kv_head=1),
            "speculative",
            {"k": 1, "ngram_size": 3, "draft": "model"},
            CacheDraw(
                "tova", {"store": "gqa", "sinks": 0, "prefill_only": True, "slack": 3, "budget": 10, "recent": 2}
            ),
            "greedy",
            ((17, 26, 26, 11, 39), (0,)),
            (1, 6),
            (139, 2**63 - 2),
        ),
        # the longer prompt's row ends first: refused by window's crop_rows ("row 0 keeps its 3 tokens (slots
        # -3..-1)") where each prompt alone decodes; the batch's refusal is a finding since then
        ComposeCase(
            ModelKey(40, position="rope", n_kv_head=1),
            "speculative",
            {"k": 1, "ngram_size": 3, "draft": "model"},
            CacheDraw("window", {"size": 10, "sinks": 2, "slack": 4, "store": "gqa"}),
            "greedy",
            ((17, 26, 26, 11, 39), (0,)),
            (1, 6),
            (139, 9),
        ),
        ComposeCase(
            _ROPE,
            "beam",
            {"num_beams": 1, "length_penalty": 1.0, "early_stopping": True},
            CacheDraw("gqa"),
            "top_k(3) | greedy",
            ((1, 2), (3,)),
            4,
            (1, 2),
            {"logprobs": 1},
        ),
    ],
)
def test_compose_cases_found_by_the_campaigns(case: ComposeCase) -> None:
    _assert_holds("compose", case)


def test_a_composition_unlike_its_reference_is_caught() -> None:
    case = ComposeCase(_ROPE, "sample", {}, CacheDraw("gqa"), "greedy", ((1, 2, 3), (4,)), 4, (1, 2))
    g = dk.decode(compose_model(case.model), [[1, 2, 3], [4]], chain="greedy", cache="gqa", max_new_tokens=4)
    report = Report()
    _compare(case, g, report, CACHE_MISMATCH, "gqa unlike dense", cache="dense")
    assert report.findings == []
    other = [(t + 1) % 7 for t in g.tokens[1]]  # no near-tie at the first token: the reference's top two differ
    _compare(case, replace(g, tokens=[g.tokens[0], other]), report, CACHE_MISMATCH, "gqa unlike dense", cache="dense")
    assert {f.kind for f in report.findings} == {CACHE_MISMATCH}


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


def _scored(n: int) -> Generation:
    return dk.generate(tiny_model(ModelKey(7)), [[1, 2, 3], [4, 5]], max_new_tokens=1, prompt_logprobs=n, logprobs=n)


def _result_findings(g: Generation, n: int = 2) -> set[str]:
    report = Report()
    check_result(g, n, n, 7, report)
    check_prompt_scores(tiny_model(ModelKey(7)), g, report)
    return {f.kind for f in report.findings}


def test_a_generation_of_the_promised_shape_passes() -> None:
    assert _result_findings(_scored(2)) == set()
    assert _result_findings(_scored(0), 0) == set()


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s[1:],  # no None first
        lambda s: [*s, s[-1]],  # one entry too many
        lambda s: [None, replace(s[1], rank=0), *s[2:]],
        lambda s: [None, replace(s[1], rank=8), *s[2:]],
        lambda s: [None, replace(s[1], top=[*s[1].top, (0, -9.0)]), *s[2:]],  # longer than asked
        lambda s: [None, replace(s[1], top=s[1].top[::-1]), *s[2:]],  # not sorted
        lambda s: [None, replace(s[1], logprob=math.nan), *s[2:]],
        lambda s: [None, replace(s[1], rank=1, logprob=s[1].top[1][1] - 1.0), *s[2:]],  # rank 1 below the top
    ],
)
def test_a_malformed_prompt_score_is_caught(change: Any) -> None:
    g = _scored(2)
    assert g.prompt_logprobs is not None
    broken = replace(g, prompt_logprobs=[change(g.prompt_logprobs[0]), g.prompt_logprobs[1]])
    assert MALFORMED in _result_findings(broken)


def test_prompt_scores_unlike_a_full_forward_are_caught() -> None:
    g = _scored(2)
    assert g.prompt_logprobs is not None
    first = g.prompt_logprobs[0]
    assert first[1] is not None
    shifted = [None, replace(first[1], logprob=first[1].logprob - 0.01), *first[2:]]
    assert _result_findings(replace(g, prompt_logprobs=[shifted, g.prompt_logprobs[1]])) == {MISMATCH}


def test_missing_or_extra_logprobs_are_caught() -> None:
    g = _scored(2)
    assert MALFORMED in _result_findings(replace(g, prompt_logprobs=None))
    assert MALFORMED in _result_findings(replace(g, logprobs=None))
    assert g.logprobs is not None
    long_top = [[replace(lp, raw_top=[*lp.raw_top, (0, -1.0)]) for lp in row] for row in g.logprobs]
    assert MALFORMED in _result_findings(replace(g, logprobs=long_top))


def test_a_row_unlike_its_prompt_alone_is_caught() -> None:
    prompts, limits = [[1, 2], [3]], [2, 3]
    case = RowLimitsCase(ModelKey(7), "generate", ((1, 2), (3,)), Arg(limits), (5, 6), "greedy")
    g = dk.generate(tiny_model(ModelKey(7)), prompts, max_new_tokens=limits, seed=[5, 6], chain="greedy")
    report = Report()
    _compare_alone(case, g, prompts, limits, report)
    assert report.findings == []
    last = g.tokens[1][-1]
    _compare_alone(case, replace(g, tokens=[g.tokens[0], [*g.tokens[1][:-1], (last + 1) % 7]]), prompts, limits, report)
    assert {f.kind for f in report.findings} == {ROW_MISMATCH}


def test_a_batch_refused_where_each_prompt_alone_decodes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rowlimits target had no such oracle (compose had): a batch with per-row limits and seeds refused while
    each prompt alone decodes counted as an accepted decodekit error."""
    decode = rowlimits._decode

    def refuses_batches(case: RowLimitsCase, prompts: list[list[int]], *args: Any) -> Any:
        if len(prompts) > 1:
            raise dk.ContextLengthError("a batch refused")
        return decode(case, prompts, *args)

    monkeypatch.setattr(rowlimits, "_decode", refuses_batches)
    case = RowLimitsCase(ModelKey(7), "generate", ((1, 2), (3,)), Arg([2, 3]), (5, 6), "greedy")
    report = Report()
    check_row_limits_case(case, report)
    assert [f.kind for f in report.findings] == [ROW_MISMATCH]
    beam = {"num_beams": 2, "length_penalty": 1.0, "early_stopping": False}
    # beam refuses limits that differ by design; one seed for the batch holds no row to its prompt alone
    for accepted in (replace(case, api="decode:beam", options=beam), replace(case, seeds=5)):
        with pytest.raises(dk.ContextLengthError):
            check_row_limits_case(accepted, report := Report())
        assert report.findings == []


def test_compose_catches_a_batch_refused_under_cfg_and_beam_with_equal_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """compose checked the refusal under sample and speculation only: cfg takes per-prompt limits, and beam refuses
    only limits that differ (as rowlimits now has it)."""
    decode = compose._decode

    def refuses_batches(case: ComposeCase, prompts: Any = None, **changes: Any) -> Any:
        if len(case.prompts if prompts is None else prompts) > 1:
            raise dk.ContextLengthError("a batch refused")
        return decode(case, prompts, **changes)

    monkeypatch.setattr(compose, "_decode", refuses_batches)
    cfg = ComposeCase(
        _ROPE, "cfg", {"scale": 1.5, "negative": None}, CacheDraw("gqa"), "greedy", ((1, 2), (3,)), (2, 3), (5, 6)
    )
    beam = replace(cfg, strategy="beam", options={"num_beams": 2, "length_penalty": 1.0, "early_stopping": False})
    for refused in (cfg, replace(beam, limits=3)):
        check_compose_case(refused, report := Report())
        assert [f.kind for f in report.findings] == [ROW_MISMATCH], refused.strategy
    with pytest.raises(dk.ContextLengthError):  # beam refuses limits that differ by design
        check_compose_case(beam, report := Report())
    assert report.findings == []


def test_a_plugin_error_is_a_finding_not_an_accepted_error() -> None:
    """A PluginError is decodekit's own error type, but raised where a plugin of this repository broke its contract
    with the engine (beam's empty row, seed 1902): the fuzz counted it among the accepted decodekit errors."""
    from decodekit.errors import PluginError
    from decodekit.testing.fuzz.outcomes import ACCEPTED, PLUGIN_BROKE, exception_finding

    try:
        raise PluginError("strategy beam: prompt 0 ended after 0 tokens")
    except PluginError as exc:
        finding = exception_finding(exc)
    assert finding.kind == PLUGIN_BROKE and finding.kind not in ACCEPTED


def test_the_samplers_to_fuzz_are_named_by_their_registered_names() -> None:
    """A plugin author's `registered_samplers(("my_sampler", ...))` (docs/reliability.md), or `fuzz.py --samplers
    top_hh`, dropped a name nothing registers without a word: the fuzz ran, passed, and never drew that sampler."""
    from decodekit.testing.fuzz import registered_samplers

    assert [s.name for s in registered_samplers(("top_k", "sample"))] == ["sample", "top_k"]
    with pytest.raises(dk.UnknownNameError, match=r"unknown sampler 'top_hh'; installed: .*did you mean 'top_h'"):
        registered_samplers(("top_hh", "sample"))


def test_fuzz_py_refuses_a_sampler_two_plugins_register_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`benchmarks/fuzz.py --samplers top_k` where a second plugin registers `top_k` too: `registered_samplers` raises
    the registry's PluginError (the name is unusable), which the script let out as a traceback; it caught only the
    UnknownNameError of a name nothing registers."""
    import importlib.util
    import sys
    from pathlib import Path

    from decodekit_top_k.params import TopKParams
    from decodekit_top_k.top_k import TopK

    @dk.hookimpl(specname="register_samplers")
    def second_top_k(register: Any) -> None:
        register("top_k", TopK, TopKParams, "a second top_k")

    plugin = type("Second", (), {"register_samplers": staticmethod(second_top_k)})()
    script = Path(__file__).parents[1] / "benchmarks" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("fuzz_script", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr("decodekit.plugins._code_plugins", [*dk.plugins._code_plugins, (plugin, "second")])
    monkeypatch.setattr(sys, "argv", ["fuzz.py", "--cases", "1", "--samplers", "top_k", "sample"])
    try:
        with pytest.warns(RuntimeWarning, match="sampler name 'top_k' is registered by 2 distributions"):
            dk.reload_plugins()
        with pytest.raises(SystemExit) as exited:
            module.main()
    finally:
        monkeypatch.undo()
        dk.reload_plugins()
    assert exited.value.code == 2  # argparse's usage error
    assert "--samplers: sampler name 'top_k' is registered by 2 distributions: decodekit-top-k and second" in (
        capsys.readouterr().err
    )


def test_a_sampler_whose_import_path_is_broken_is_fuzzed_and_found_broken() -> None:
    """`registered_samplers` keeps it (its kind is its registration's, read without importing it), so the fuzz draws
    it and reports the PluginError of its import; its docstring said such a sampler was left out."""
    from decodekit.testing.fuzz import registered_samplers
    from decodekit.testing.fuzz.outcomes import PLUGIN_BROKE, exception_finding

    @dk.hookimpl(specname="register_samplers")
    def broken(register: Any) -> None:
        register("broken_path", "no_such_module_here:Stage", dk.params.NoParams, "an import path that fails")

    plugin = type("Broken", (), {"register_samplers": staticmethod(broken)})()
    dk.register_plugin(plugin, name="broken-path")
    try:
        assert [s.name for s in registered_samplers(("broken_path", "sample"))] == ["broken_path", "sample"]
        with pytest.raises(dk.PluginError) as raised:
            dk.Chain.parse("broken_path | sample")
        assert exception_finding(raised.value).kind == PLUGIN_BROKE
    finally:
        dk.unregister_plugin(plugin)


def test_the_samplers_to_fuzz_given_as_one_string_are_refused_naming_the_parameter() -> None:
    """`registered_samplers("mirostat_v2")`: a string is a sequence of names one letter long; it was read by letters
    ('unknown sampler 'm''), and before today by substrings (it fuzzed `mirostat` too)."""
    from decodekit.testing.fuzz import registered_samplers

    with pytest.raises(dk.ParameterError, match=r"names='mirostat_v2' is a string; allowed: .*\('mirostat_v2',\)"):
        registered_samplers("mirostat_v2")  # type: ignore[arg-type]
    assert [s.name for s in registered_samplers(("mirostat_v2",))] == ["mirostat_v2"]

"""The row-limits target: `max_new_tokens` as one int per prompt (valid lists and hostile ones), with a seed per
prompt, through `generate`, `stream` and `dk.decode` under sample, beam, cfg and speculative.

The property (a second implementation: the same call per prompt): each prompt's tokens and finish reason in the
batch are those it gets decoded alone with its own seed and limit, and a batch is not refused where each prompt
alone decodes (the compose target's oracle); no row runs past its limit. Beam search refuses limits that differ; a
list that is not one valid limit per prompt must be refused naming `max_new_tokens`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import decodekit as dk
from decodekit.errors import DecodekitError, ParameterError
from decodekit.results import Generation
from decodekit.testing.fuzz.catalogue import SamplerInfo, registered_samplers
from decodekit.testing.fuzz.chains import ChainDraw, chain_draws
from decodekit.testing.fuzz.generation import ACCEPTED_BAD, Arg, ModelKey, check_result, tiny_model
from decodekit.testing.fuzz.outcomes import MALFORMED, ROW_MISMATCH, Report

__all__ = ["RowLimitsCase", "check_row_limits_case", "row_limits_cases"]

_MAX_STEPS = 6
_STRATEGIES = ("generate", "stream", "decode:sample", "decode:beam", "decode:cfg", "decode:speculative")
# Chains that run on any vocabulary (the drawn ones are often refused before a token is made).
_CHAINS = (None, "greedy", "top_k(3) | temperature(0.7)", "top_p(0.8) | sample", "min_p(0.2) | gumbel",
           "repetition_penalty(1.3) | top_k(2)", "mirostat(tau=2)", "xtc(threshold=0.1, probability=0.5)")  # fmt: skip


@dataclass(frozen=True)
class RowLimitsCase:
    model: ModelKey
    api: str  # one of _STRATEGIES
    prompts: tuple[tuple[int, ...], ...]
    limits: Arg  # the max_new_tokens list (or a hostile value in its place)
    seeds: tuple[int, ...] | int | None  # per prompt (the property is checked only then), one for the batch, or None
    chain: str | ChainDraw | None = None
    options: dict[str, Any] = field(default_factory=dict)  # the strategy's own
    kwargs: dict[str, Any] = field(default_factory=dict)  # stop_tokens, logprobs, cache

    def names(self) -> list[str]:
        return self.chain.names() if isinstance(self.chain, ChainDraw) else []


def _limits(rows: int) -> st.SearchStrategy[Arg]:
    """One valid limit per prompt (a list, a tuple, a range), or a value that is not (refused), or an edge."""
    valid = st.lists(st.integers(0, _MAX_STEPS), min_size=rows, max_size=rows)
    N, E = False, None
    bad = [([-1] * rows, N), ([1.5] * rows, N), (["3"] * rows, N), ([None] * rows, N), ([[1]] * rows, N),
           ([2] * (rows + 1), N), ([2] * (rows - 1), N), ([], N), ({0: 1}, N), ("3" * rows, N), (b"\x03" * rows, E),
           ([True] * rows, E), ([2**64] * rows, E), ([2**63] * rows, E), ([0, -1] * rows, N)]  # fmt: skip
    return st.one_of(
        valid.map(Arg),
        valid.map(lambda v: Arg(tuple(v), True, f"tuple{tuple(v)}")),
        st.integers(0, _MAX_STEPS).map(lambda n: Arg(range(n, n + rows), True, f"range({n}, {n + rows})")),
        st.sampled_from(bad).map(lambda t: Arg(t[0], t[1])),
    )


def _options(api: str, vocab_size: int) -> st.SearchStrategy[dict[str, Any]]:
    if api == "decode:beam":
        penalty, stopping = st.sampled_from([1.0, 0.0, -0.5, 2.0]), st.sampled_from([False, True, "never"])
        return st.fixed_dictionaries(
            {"num_beams": st.integers(1, 3), "length_penalty": penalty, "early_stopping": stopping}
        )
    if api == "decode:cfg":
        negative = st.sampled_from([None, [0], [vocab_size - 1, 0]])
        return st.fixed_dictionaries({"scale": st.sampled_from([1.5, 3.0, -2.0, 0.0]), "negative": negative})
    if api == "decode:speculative":
        drafts = st.sampled_from(["ngram", "model"])
        return st.fixed_dictionaries({"draft": drafts, "k": st.integers(1, 4), "ngram_size": st.integers(1, 3)})
    return st.just({})


@st.composite
def row_limits_cases(draw: st.DrawFn, samplers: Sequence[SamplerInfo] | None = None) -> RowLimitsCase:
    V = draw(st.sampled_from((2, 7, 40)))
    dtype = draw(st.sampled_from(("float32", "float32", "bfloat16")))
    model = ModelKey(V, dtype, draw(st.sampled_from(("learned", "rope"))), tokenizer=draw(st.booleans()))
    rows = draw(st.integers(1, 4))
    prompts = draw(st.lists(st.lists(st.integers(0, V - 1), min_size=1, max_size=5), min_size=rows, max_size=rows))
    seeds = draw(
        st.one_of(
            st.lists(st.integers(0, 2**64 - 1), min_size=rows, max_size=rows).map(tuple),
            st.integers(0, 2**63 - 1),
            st.none(),
        )
    )
    if draw(st.integers(0, 3)) == 0:
        chain: str | ChainDraw | None = draw(chain_draws(tuple(samplers or registered_samplers()), V))
    else:
        chain = draw(st.sampled_from(_CHAINS))
    api = draw(st.sampled_from(_STRATEGIES))
    kwargs: dict[str, Any] = {}
    if draw(st.booleans()):
        kwargs["stop_tokens"] = draw(st.lists(st.integers(0, V - 1), max_size=2))
    if model.tokenizer and draw(st.booleans()):  # letters: a stop string ends a row before its limit, or not
        letters = st.sampled_from([["a"], ["b"], ["ab", "ba"], ["c"], []])
        kwargs["stop_strings"] = draw(st.one_of(letters, st.lists(letters, min_size=rows, max_size=rows)))
    if draw(st.booleans()):
        kwargs["logprobs"] = draw(st.integers(0, min(V, 3)))
    limits = draw(_limits(rows))
    if draw(st.booleans()):
        kwargs["cache"] = draw(st.sampled_from(("dense", "none", "window(size=4)", "h2o(budget=12)", "int8")))
    if limits.valid is None and kwargs.get("cache") in ("none", "window(size=4)", "h2o(budget=12)"):
        del kwargs["cache"]  # past the context these run on (rightly): 2**63 tokens would be a hang, not a finding
    return RowLimitsCase(model, api, tuple(map(tuple, prompts)), limits, seeds, chain, draw(_options(api, V)), kwargs)


def _chain(case: RowLimitsCase) -> Any:
    return case.chain.text() if isinstance(case.chain, ChainDraw) else case.chain


def _decode(
    case: RowLimitsCase, prompts: list[list[int]], limits: Any, seeds: Any, alone: int | None = None
) -> Generation | None:
    """The case's call on `prompts` (a stream is drained: its result); `alone`: the index of the case's one prompt
    given, whose own stop strings it takes where they are given per prompt."""
    model = tiny_model(case.model)
    options = dict(case.options)
    if options.get("draft") == "model":  # another tiny model of the same vocabulary as the draft
        options["draft"] = tiny_model(ModelKey(case.model.vocab_size, position="rope"))
    kwargs = {"chain": _chain(case), "max_new_tokens": limits, "seed": seeds, **case.kwargs}
    stops = kwargs.get("stop_strings")
    if alone is not None and stops and all(isinstance(s, list) for s in stops):
        kwargs["stop_strings"] = [stops[alone]]
    if case.api == "stream":
        events = dk.stream(model, prompts, **kwargs)
        for _ in events:
            pass
        return events.result
    if case.api == "generate":
        return dk.generate(model, prompts, **kwargs)
    return dk.decode(model, prompts, strategy=case.api.partition(":")[2], **kwargs, **options)


def check_row_limits_case(case: RowLimitsCase, report: Report) -> None:
    """Run the batch, then each prompt alone; exceptions of the batch propagate."""
    prompts = [list(p) for p in case.prompts]
    try:
        g = _decode(case, prompts, case.limits.value, case.seeds)
    except DecodekitError as exc:
        if isinstance(exc, ParameterError) and case.limits.valid is False and "max_new_tokens" not in str(exc):
            report.add(MALFORMED, f"a bad max_new_tokens refused under another name: {str(exc)[:60]}")
        elif _per_row(case) and _each_alone_runs(case, prompts):
            report.add(ROW_MISMATCH, f"{case.api}: the batch raised {type(exc).__name__}")
            return
        raise
    if case.limits.valid is False:
        report.add(ACCEPTED_BAD, f"max_new_tokens={case.limits.describe()}")
        return
    if g is None:
        report.add(MALFORMED, f"{case.api}: no result once the stream ended")
        return
    check_result(g, case.kwargs.get("logprobs"), None, case.model.vocab_size, report)
    limits = [int(n) for n in case.limits.value]
    if case.api == "decode:beam" and len(set(limits)) > 1:
        report.add(ACCEPTED_BAD, f"beam with max_new_tokens={limits}")
    for row, limit in zip(g.tokens, limits):
        if len(row) > limit:
            report.add(MALFORMED, f"{case.api}: {len(row)} tokens past max_new_tokens={limit}")
    comparable = isinstance(case.seeds, tuple)  # each row draws its own numbers (beam's chain too: xtc draws)
    if comparable:
        _compare_alone(case, g, prompts, limits, report)


def _compare_alone(
    case: RowLimitsCase, g: Generation, prompts: list[list[int]], limits: list[int], report: Report
) -> None:
    for b, prompt in enumerate(prompts):
        seed = [case.seeds[b]] if isinstance(case.seeds, tuple) else case.seeds
        try:
            alone = _decode(case, [prompt], limits[b], seed, b)
        except DecodekitError as exc:  # the batch ran: the prompt alone must too
            report.add(ROW_MISMATCH, f"{case.api}: alone, {type(exc).__name__}")
            continue
        assert alone is not None
        if alone.tokens[0] != g.tokens[b]:
            report.add(ROW_MISMATCH, f"{case.api}: tokens")
        elif alone.finish_reasons[0] != g.finish_reasons[b]:
            reasons = f"{g.finish_reasons[b]}, alone {alone.finish_reasons[0]}"
            report.add(ROW_MISMATCH, f"{case.api}: finish reason {reasons}")


def _per_row(case: RowLimitsCase) -> bool:
    """Whether each row of the batch is held to its prompt alone (as `_compare_alone` holds a batch that ran): valid
    limits and a seed per row; beam refuses limits that differ by design (one search)."""
    if len(case.prompts) < 2 or not isinstance(case.seeds, tuple) or case.limits.valid is not True:
        return False
    return case.api != "decode:beam" or len(set(case.limits.value)) == 1


def _each_alone_runs(case: RowLimitsCase, prompts: list[list[int]]) -> bool:
    """Whether every prompt alone, with its own limit and seed, decodes without a decodekit error (a batch that
    raises where each row alone runs refused what its rows' own calls accept)."""
    assert isinstance(case.seeds, tuple)
    limits = [int(n) for n in case.limits.value]
    try:
        for b, prompt in enumerate(prompts):
            _decode(case, [prompt], limits[b], [case.seeds[b]], b)
    except DecodekitError:
        return False
    return True

"""The compose target: a strategy (sample, beam, speculative with prompt lookup or a model draft, cfg) x a cache
(every registered backend, with drawn parameters, or none) x a chain (penalties and grammar stages included) x
options (logprobs, prompt_logprobs, per-prompt seeds and limits, stop tokens and strings, ragged prompts).

Besides "ok or a decodekit error", the properties the docs promise, each only where they promise it:
- a cache that keeps every token the text needs (`dense`, `gqa`, a `window` or scored budget wider than the text)
  gives `dense`'s tokens under an argmax chain (docs/caches.md; `int8` is lossy: not compared);
- speculation with an argmax chain gives `sample`'s tokens through the same cache, where that cache keeps all or
  is `int8` or a `window` (docs/speculative.md); with a sampled chain and seeds, the same tokens on
  a second run;
- `beam` with `num_beams=1` gives greedy's tokens (docs/strategies.md) under a chain whose processors keep the
  argmax of log-probabilities and of logits alike;
- with one seed per prompt, a row of the batch equals its prompt decoded alone, under every cache (`knorm`'s batch
  dependence is documented: left out), and a batch is not refused where each prompt alone decodes (but `beam`'s
  limits that differ, refused by design);
- `logprobs` and `prompt_logprobs` well-formed, prompt scores those of one uncached forward.

An argmax comparison that parts at a near-tie of the reference's top two (rounding, documented) is not counted."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

import decodekit as dk
from decodekit.chain import Chain
from decodekit.errors import DecodekitError
from decodekit.plugins import get_registry
from decodekit.results import Generation
from decodekit.testing.fuzz.catalogue import SamplerInfo, registered_samplers
from decodekit.testing.fuzz.chains import chain_draws
from decodekit.testing.fuzz.generation import ModelKey, check_prompt_scores, check_result, tiny_model
from decodekit.testing.fuzz.outcomes import CACHE_MISMATCH, ROW_MISMATCH, SPEC_MISMATCH, Report
from decodekit.testing.tiny_lm import Letters, TinyLM

__all__ = ["ByteLetters", "CacheDraw", "ComposeCase", "check_compose_case", "compose_cases", "compose_model"]

_BLOCK = 16  # the tiny model's context (generation.py)
_TIE = 1e-3  # a reference's top two closer than this: rounding may pick either (docs/speculative.md)
_PROCESSORS = (
    "top_k(3)", "top_p(0.8)", "min_p(0.1)", "temperature(0.7)", "repetition_penalty(1.3)", "presence_penalty(0.5)",
    "frequency_penalty(0.5)", "no_repeat_ngram(2)", "dry(multiplier=0.8)", "min_new_tokens(n=2, stop_tokens=[0])",
    "bad_words([[1]])", "logit_bias({1: 2.0})", "allowed_tokens([0, 1, 2, 3])", "xtc(threshold=0.1, probability=0.5)",
    "typical(0.9)", "epsilon(0.01)", "sequence_bias([[[1, 2], -3.0]])", "top_n_sigma(1.0)",
)  # fmt: skip
_GRAMMARS = ("regex(pattern='[a-c]+')", 'grammar(lark=\'start: ("a" | "b")+\')', "json")
_SELECTORS = ("greedy", "greedy", "sample", "gumbel", "mirostat(tau=2)", "mirostat_v2", "adaptive_p(0.3)")
# Processors under which the argmax of log_softmax(x) and of x agree (beam scores log-probabilities).
_SHIFT_SAFE = {"top_k", "top_p", "min_p", "temperature", "bad_words", "logit_bias", "allowed_tokens",
               "no_repeat_ngram", "min_new_tokens", "sequence_bias", "regex", "grammar", "json"}  # fmt: skip
_RANDOM = {"xtc"}  # draws from the row's generator: the same tokens only with the same draws (docs/speculative.md)
_KEEP_ALL = ("dense", "gqa")  # int8 keeps every token, lossily
_SCORED = ("h2o", "tova", "snapkv", "knorm", "streaming")


class ByteLetters(Letters):
    """`Letters` that state their bytes, so grammar stages (regex, lark, json) run on the tiny model."""

    def token_bytes(self) -> list[bytes]:
        return [self.decode([i]).encode() for i in range(self.vocab_size)]


@dataclass(frozen=True)
class CacheDraw:
    name: str  # a registered backend or "none"
    params: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}({args})" if args else self.name

    def keeps(self, slots: int) -> bool:
        """Whether it keeps every token of a text of `slots` slots, each exactly (nothing evicted, nothing lossy)."""
        p = self.params
        if self.name in _KEEP_ALL or (self.name != "none" and p.get("store") == "int8"):
            return self.name in _KEEP_ALL
        if self.name == "window":
            return int(p.get("size", 0)) + int(p.get("sinks", 0)) >= slots  # bare: size="auto"
        if self.name in _SCORED:
            return int(p.get("budget", 0)) >= slots  # bare: a compression, not a budget
        return self.name == "none"


@dataclass(frozen=True)
class ComposeCase:
    model: ModelKey
    strategy: str  # sample, beam, cfg, speculative
    options: dict[str, Any]  # the strategy's own ("draft": "ngram" or "model")
    cache: CacheDraw
    chain: str
    prompts: tuple[tuple[int, ...], ...]
    limits: int | tuple[int, ...]
    seeds: tuple[int, ...] | int | None
    kwargs: dict[str, Any] = field(default_factory=dict)  # logprobs, stop_tokens, stop_strings, ...

    def spec(self) -> list[dict[str, Any]]:
        """The chain's stages, its selector (`sample` when none is named) last; empty if it does not parse."""
        try:
            return Chain.parse(self.chain).to_spec()
        except DecodekitError:
            return []

    def names(self) -> list[str]:
        return [stage["name"] for stage in self.spec()]

    def argmax(self) -> bool:
        """Whether the chain picks the argmax of what deterministic processors leave."""
        names = self.names()
        return names[-1:] == ["greedy"] and not _RANDOM & set(names)

    def slots(self) -> int:
        """Slots a row of the batch takes: the longest prompt, its new tokens, a speculative round's drafts."""
        limit = self.limits if isinstance(self.limits, int) else max(self.limits)
        return max(map(len, self.prompts)) + limit + int(self.options.get("k", 0))


@lru_cache(maxsize=16)
def compose_model(key: ModelKey) -> TinyLM:
    """The fuzz's tiny model; with a tokenizer, one whose tokens state their bytes (grammar stages)."""
    model = tiny_model(ModelKey(key.vocab_size, key.dtype, key.position, key.n_kv_head))
    if key.tokenizer:
        model = copy.deepcopy(model)
        model.tokenizer = ByteLetters(key.vocab_size)  # type: ignore[assignment]
    return model


def _caches() -> st.SearchStrategy[CacheDraw]:
    names = sorted(get_registry().caches)
    stores = st.sampled_from(("gqa", "dense", "int8"))
    window = st.fixed_dictionaries(
        {"size": st.integers(1, 12), "sinks": st.integers(0, 4), "slack": st.integers(1, 6), "store": stores}
    )
    scored = st.fixed_dictionaries(
        {
            "budget": st.integers(4, 16),
            "sinks": st.integers(0, 2),
            "recent": st.integers(0, 2),
            "slack": st.integers(1, 6),
            "store": stores,
            "prefill_only": st.booleans(),
        }
    )
    snap = {"window": st.integers(1, 4), "kernel": st.sampled_from((1, 3)), "decode": st.sampled_from(("h2o", "tova"))}
    drawn = {
        "window": window,
        "snapkv": st.tuples(scored, st.fixed_dictionaries(snap)).map(lambda t: {**t[0], **t[1]}),
        **{name: scored for name in _SCORED if name != "snapkv"},
    }
    bare = st.sampled_from(names).map(CacheDraw)  # the scored ones' default budget is refused on a tiny context
    weighed = [n for n in names if n in drawn] + ["window"] * 2  # one of six, yet the most promised of: weighed up
    params = st.sampled_from(weighed).flatmap(lambda n: drawn[n].map(lambda p: CacheDraw(n, p)))
    return st.integers(0, 9).flatmap(
        lambda i: bare if i == 0 else st.sampled_from([*_KEEP_ALL, "int8", "none"]).map(CacheDraw) if i < 5 else params
    )


@st.composite
def _chain(
    draw: st.DrawFn, samplers: Sequence[SamplerInfo], vocab_size: int, grammar: bool, selectors: Sequence[str]
) -> str:
    if draw(st.integers(0, 4)) == 0:  # now and then any registered sampler, drawn with any parameters
        return draw(chain_draws(tuple(samplers), vocab_size)).text()
    pool = _PROCESSORS + (_GRAMMARS if grammar else ())
    stages = draw(st.lists(st.sampled_from(pool), max_size=3, unique=True))
    return " | ".join([*stages, draw(st.sampled_from(selectors))])


def _options(strategy: str, vocab_size: int) -> st.SearchStrategy[dict[str, Any]]:
    if strategy == "beam":
        return st.fixed_dictionaries(
            {
                "num_beams": st.sampled_from((1, 1, 2, 3)),
                "length_penalty": st.sampled_from((1.0, 0.0, -0.5, 2.0)),
                "early_stopping": st.sampled_from((False, True, "never")),
            }
        )
    if strategy == "cfg":
        negative = st.sampled_from((None, [0], [vocab_size - 1, 0]))
        return st.fixed_dictionaries({"scale": st.sampled_from((1.5, 3.0, 0.0)), "negative": negative})
    if strategy == "speculative":
        return st.fixed_dictionaries(
            {"draft": st.sampled_from(("ngram", "model")), "k": st.integers(1, 4), "ngram_size": st.integers(1, 3)}
        )
    return st.just({})


@st.composite
def compose_cases(draw: st.DrawFn, samplers: Sequence[SamplerInfo] | None = None) -> ComposeCase:
    V = draw(st.sampled_from((7, 40)))
    dtype = draw(st.sampled_from(("float32", "float32", "float32", "bfloat16")))
    model = ModelKey(V, dtype, draw(st.sampled_from(("learned", "rope"))), draw(st.sampled_from((None, 1))),
                     tokenizer=draw(st.booleans()))  # fmt: skip
    rows = draw(st.integers(1, 3))
    prompts = draw(st.lists(st.lists(st.integers(0, V - 1), min_size=1, max_size=5), min_size=rows, max_size=rows))
    if rows > 1 and draw(st.booleans()):  # a prompt's copy (n samples): the engine prefills it once
        prompts[-1] = list(prompts[0])
    strategy = draw(st.sampled_from(("sample", "beam", "cfg", "speculative", "speculative")))
    per_row = st.lists(st.integers(0, 6), min_size=rows, max_size=rows).map(tuple)
    if strategy == "beam" and draw(st.integers(0, 3)):  # beam refuses limits that differ: mostly one for all
        per_row = st.integers(0, 6).map(lambda n: (n,) * rows)
    limits: int | tuple[int, ...] = draw(st.one_of(st.integers(0, 6), per_row))
    seeds = draw(
        st.one_of(
            st.lists(st.integers(0, 2**63 - 1), min_size=rows, max_size=rows).map(tuple),
            st.integers(0, 2**63 - 1),
            st.none(),
        )
    )
    kwargs: dict[str, Any] = {}
    for name, values in (
        ("logprobs", st.integers(0, 3)),
        ("prompt_logprobs", st.integers(0, 3)),
        ("stop_tokens", st.lists(st.integers(0, V - 1), max_size=2)),
    ):
        if draw(st.booleans()):
            kwargs[name] = draw(values)
    if model.tokenizer and draw(st.booleans()):
        kwargs["stop_strings"] = draw(st.sampled_from((["a"], ["b"], ["ab", "ba"], ["c"])))
        kwargs["include_stop_str_in_output"] = draw(st.booleans())
    safe = strategy == "speculative" and draw(st.integers(0, 3))  # mostly selectors speculation takes
    selectors = _SELECTORS[:4] if safe else _SELECTORS
    chain = draw(_chain(tuple(samplers or registered_samplers()), V, model.tokenizer, selectors))
    options = draw(_options(strategy, V))
    return ComposeCase(
        model, strategy, options, draw(_caches()), chain, tuple(map(tuple, prompts)), limits, seeds, kwargs
    )


def _decode(case: ComposeCase, prompts: Sequence[Sequence[int]] | None = None, **changes: Any) -> Generation:
    """The case's call, on other prompts or with other arguments (`changes`: a new strategy drops the case's
    strategy options)."""
    strategy = changes.get("strategy", case.strategy)
    options = dict(case.options) if strategy == case.strategy else {}
    if options.get("draft") == "model":  # another tiny model of the same vocabulary
        options["draft"] = tiny_model(ModelKey(case.model.vocab_size, position="rope"))
    args = {
        "strategy": case.strategy,
        "chain": case.chain,
        "cache": case.cache.text(),
        "max_new_tokens": case.limits,
        "seed": case.seeds,
        **case.kwargs,
        **options,
        **changes,
    }
    rows = [list(p) for p in (case.prompts if prompts is None else prompts)]
    return dk.decode(compose_model(case.model), rows, **args)


def check_compose_case(case: ComposeCase, report: Report) -> None:
    """Run the case, check its result, then each property the docs promise for it; the case's exceptions
    propagate, a reference run's decodekit error is a finding of the property."""
    try:
        g = _decode(case)
    except DecodekitError as exc:
        # beam refuses limits that differ by prompt by design (one search): not a row's refusal
        differ = isinstance(case.limits, tuple) and len(set(case.limits)) > 1
        per_row = isinstance(case.seeds, tuple) and not (case.strategy == "beam" and differ)
        if per_row and _batch_invariant(case) and _each_alone_runs(case):
            report.add(ROW_MISMATCH, f"{case.strategy} / {case.cache.name}: the batch raised {type(exc).__name__}")
            return
        raise
    check_result(g, case.kwargs.get("logprobs"), case.kwargs.get("prompt_logprobs"), case.model.vocab_size, report)
    if case.kwargs.get("prompt_logprobs") is not None and _prompt_scores_exact(case.cache, case.prompts):
        check_prompt_scores(compose_model(case.model), g, report)
    exact = case.model.dtype == "float32"  # bfloat16 rounds blocks and steps apart (documented)
    if (
        exact
        and case.argmax()
        and case.strategy == "sample"
        and case.cache.name != "dense"
        and case.cache.keeps(case.slots())
    ):
        _compare(case, g, report, CACHE_MISMATCH, f"{case.cache.name} unlike dense", cache="dense")
    if exact and case.strategy == "speculative":
        _check_speculative(case, g, report)
    if exact and case.strategy == "beam" and _beam_is_greedy(case):
        greedy = [*case.spec()[:-1], {"name": "greedy"}]  # beam ignores the selector, keeps the processors
        _compare(case, g, report, SPEC_MISMATCH, "beam(num_beams=1) unlike greedy", strategy="sample", chain=greedy)
    if exact and isinstance(case.seeds, tuple) and _batch_invariant(case):
        _compare_alone(case, g, report)


def _prompt_scores_exact(cache: CacheDraw, prompts: Sequence[Sequence[int]]) -> bool:
    """Whether the prompt's scores are the full forward's: not through int8's quantized keys nor a window that
    evicts within the prompt (docs/concepts.md: those are the cache's); a scored cache compresses after it."""
    return (cache.name in _SCORED and cache.params.get("store") != "int8") or cache.keeps(max(map(len, prompts)))


def _check_speculative(case: ComposeCase, g: Generation, report: Report) -> None:
    cache = case.cache
    if case.argmax() and (cache.keeps(case.slots()) or cache.name in ("int8", "window")):
        _compare(case, g, report, SPEC_MISMATCH, f"speculative unlike sample through {cache.name}", strategy="sample")
    elif case.seeds is not None and not case.argmax():
        _compare(case, g, report, SPEC_MISMATCH, "speculative: a second run with the same seeds")


def _beam_is_greedy(case: ComposeCase) -> bool:
    """num_beams=1 without the documented exception; a chain whose processors keep the argmax of log-probabilities."""
    o = case.options
    never = o["early_stopping"] == "never" and o["length_penalty"] > 0
    return o["num_beams"] == 1 and not never and bool(case.spec()) and set(case.names()[:-1]) <= _SHIFT_SAFE


def _batch_invariant(case: ComposeCase) -> bool:
    """Whether docs promise a row of the batch its tokens alone under this case's cache."""
    return len(case.prompts) > 1 and case.cache.name != "knorm"  # knorm: ties of float32 norms (docs/caches.md)


def _compare(case: ComposeCase, g: Generation, report: Report, kind: str, what: str, **changes: Any) -> None:
    """The case's tokens against a reference run (the case's call with `changes`); near-ties left out."""
    try:
        ref = _decode(case, **changes, logprobs=2)  # its top two tell a near-tie
    except DecodekitError as exc:
        # Known and left: beam and speculative run no chain for zero tokens, so a chain that does not fit the
        # vocabulary is refused only by the reference (sample runs it on the prefill's logits).
        if max(case.limits if isinstance(case.limits, tuple) else (case.limits,)) > 0:
            report.add(kind, f"{what}: the reference raised {type(exc).__name__}")
        return
    for b, (row, ref_row) in enumerate(zip(g.tokens, ref.tokens)):
        if row != ref_row and not _near_tie(ref, b, row, ref_row):
            report.add(kind, what)


def _near_tie(ref: Generation, b: int, row: list[int], ref_row: list[int]) -> bool:
    """Whether the rows part where the reference's top two processed log-probabilities are within `_TIE`."""
    i = next((j for j, (x, y) in enumerate(zip(row, ref_row)) if x != y), min(len(row), len(ref_row)))
    lps = (ref.logprobs or [[]])[b]
    if i >= len(lps):  # one row ended first (a stop string on a tied token, say): look one back
        i = len(lps) - 1
    if i < 0:
        return False
    top = [v for _, v in lps[i].processed_top]
    return len(top) >= 2 and (top[0] - top[1] < _TIE or math.isnan(top[0]))


def _compare_alone(case: ComposeCase, g: Generation, report: Report) -> None:
    """Each row against its prompt alone; a row whose model log-probabilities differ in their bits before it parts
    is left out (torch's kernels give a row other bits at another batch size: docs/speculative.md)."""
    assert isinstance(case.seeds, tuple)
    limits = [case.limits] * len(case.prompts) if isinstance(case.limits, int) else list(case.limits)
    V = case.model.vocab_size
    batch: Generation | None = None
    for b, prompt in enumerate(case.prompts):
        try:
            alone = _decode(case, [prompt], max_new_tokens=limits[b], seed=[case.seeds[b]], logprobs=V)
        except DecodekitError as exc:  # the batch ran: the prompt alone must too
            report.add(ROW_MISMATCH, f"{case.strategy} / {case.cache.name}: alone, {type(exc).__name__}")
            continue
        if alone.tokens[0] == g.tokens[b]:
            continue
        batch = batch or _decode(case, logprobs=V)
        if _same_bits(batch, b, alone) and batch.tokens[b] == g.tokens[b]:
            report.add(ROW_MISMATCH, f"{case.strategy} / {case.cache.name}: tokens")


def _each_alone_runs(case: ComposeCase) -> bool:
    """Whether every prompt alone, with its own limit and seed, decodes without a decodekit error (a batch that
    raises where each row alone runs refused what its rows' own calls accept)."""
    assert isinstance(case.seeds, tuple)
    limits = [case.limits] * len(case.prompts) if isinstance(case.limits, int) else list(case.limits)
    try:
        for b, prompt in enumerate(case.prompts):
            _decode(case, [prompt], max_new_tokens=limits[b], seed=[case.seeds[b]])
    except DecodekitError:
        return False
    return True


def _same_bits(batch: Generation, b: int, alone: Generation) -> bool:
    """Whether row `b` of `batch` and `alone`'s row saw the same raw log-probabilities up to where they part."""
    row, own = batch.tokens[b], alone.tokens[0]
    i = next((j for j, (x, y) in enumerate(zip(row, own)) if x != y), min(len(row), len(own)))
    lps, own_lps = (batch.logprobs or [[]])[b], (alone.logprobs or [[]])[0]
    return all(x.raw_top == y.raw_top for x, y in zip(lps[: i + 1], own_lps[: i + 1]))

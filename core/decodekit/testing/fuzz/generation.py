"""The generation target: `generate` and `stream` on the kit's tiny model, with random chains,
caches and arguments, wrong types included.

Each drawn argument knows whether it is valid: one that is not must be rejected with a decodekit
error, so a generation that runs anyway is a finding ("bad argument accepted"), as is a token out of
range or one the chain removed (its processed log-probability is -inf)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from hypothesis import strategies as st

import decodekit as dk
from decodekit.plugins import get_registry
from decodekit.results import Generation
from decodekit.testing.fuzz.catalogue import SamplerInfo, params_model, registered_samplers
from decodekit.testing.fuzz.chains import ChainDraw, chain_draws
from decodekit.testing.fuzz.outcomes import MALFORMED, MISMATCH, MUTATED, OUT_OF_RANGE, REVIVED, UNFLAGGED, Report
from decodekit.testing.fuzz.values import params_dicts
from decodekit.testing.tiny_lm import Letters, TinyLM

__all__ = ["ACCEPTED_BAD", "GenerateCase", "ModelKey", "check_generate_case", "generate_cases", "tiny_model"]

ACCEPTED_BAD = "bad argument accepted"
"""A finding of this target: an argument that is not valid went through without an error."""

_BLOCK_SIZE = 16  # the tiny model's context: long runs meet the ContextLengthError
_VOCAB_SIZES = (1, 2, 7, 40)
_MAX_STEPS = 6  # new tokens in a case that runs (larger values only where they must be refused)


@dataclass(frozen=True)
class ModelKey:
    vocab_size: int
    dtype: str = "float32"
    position: str = "learned"
    n_kv_head: int | None = None
    tokenizer: bool = False  # letters: text prompts and stop strings work


@lru_cache(maxsize=64)
def tiny_model(key: ModelKey) -> TinyLM:
    """A one-layer kit model of 8 dimensions; random weights, the same for the same key."""
    model = TinyLM(
        key.vocab_size, dim=8, n_layers=1, n_heads=2, n_kv_heads=key.n_kv_head, max_positions=_BLOCK_SIZE,
        position=key.position, seed=key.vocab_size,  # type: ignore[arg-type]
    ).to(getattr(torch, key.dtype))  # fmt: skip
    if key.tokenizer:
        model.tokenizer = Letters(key.vocab_size)  # type: ignore[assignment]
    return model


@dataclass(frozen=True)
class Arg:
    """A drawn argument value; `valid` False: it must be refused; None: either way is fine."""

    value: Any
    valid: bool | None = True
    label: str = ""  # how a finding names it; the value's repr when empty

    def describe(self) -> str:
        return self.label or _short(self.value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} ..."


@dataclass(frozen=True)
class GenerateCase:
    model: ModelKey
    api: str  # "generate", "stream", or "decode:<strategy>" (`dk.decode` with a registered strategy)
    prompts: Arg
    chain: ChainDraw
    chain_form: str  # "chain" (a Chain object), "string", "spec", "none", or "bad" (`bad_chain`)
    kwargs: dict[str, Arg] = field(default_factory=dict)
    bad_chain: Any = None
    options: dict[str, Any] = field(default_factory=dict)  # a strategy's own, from its parameter model

    def names(self) -> list[str]:
        return self.chain.names() if self.chain_form in ("chain", "string", "spec") else []

    def invalid(self) -> list[str]:
        """The arguments drawn invalid, as `name=value`."""
        args = {"prompts": self.prompts, **self.kwargs}
        bad = [f"{k}={a.describe()}" for k, a in args.items() if a.valid is False]
        return bad + ([f"chain={_short(self.bad_chain)}"] if self.chain_form == "bad" else [])


def _prompts(vocab_size: int) -> st.SearchStrategy[Arg]:
    V = vocab_size
    ids = st.lists(st.integers(0, V - 1), min_size=1, max_size=6)
    rows = st.lists(ids, min_size=1, max_size=3)
    bad_id = st.sampled_from([V, V + 1, -1, 2**63, 1.5, 1.0, "a", None])
    return st.one_of(
        rows.map(Arg),
        ids.map(Arg),
        ids.map(lambda r: Arg(torch.tensor(r))),
        rows.filter(lambda rs: len({len(r) for r in rs}) == 1).map(lambda rs: Arg(torch.tensor(rs))),
        ids.map(lambda r: Arg(torch.tensor(r, dtype=torch.int32))),
        st.tuples(ids, bad_id).map(lambda t: Arg([[*t[0], t[1]]], False, f"[[..., {t[1]!r}]]")),
        st.sampled_from([[], [[]], [[], [0]], None, 5, "", torch.zeros(0, dtype=torch.long)]).map(
            lambda v: Arg(v, False)
        ),
        ids.map(lambda r: Arg(torch.tensor(r, dtype=torch.float32), False, "a float32 tensor")),
        st.sampled_from(["ab", ["a", "b"]]).map(lambda v: Arg(v, None)),  # text: needs a tokenizer
        st.sampled_from([[[True, False]], torch.zeros(1, 1, 1, dtype=torch.long)]).map(lambda v: Arg(v, None)),
    )


def _rows(prompts: Any) -> int:
    """How many rows `prompts` holds (per-row arguments are drawn for that many)."""
    if isinstance(prompts, torch.Tensor):
        return prompts.shape[0] if prompts.dim() == 2 else 1
    if isinstance(prompts, list) and prompts and isinstance(prompts[0], (list, str)):
        return len(prompts)
    return 1


def _choices(*values: tuple[Any, bool | None]) -> st.SearchStrategy[Arg]:
    return st.sampled_from([Arg(v, ok) for v, ok in values])


def _kwargs(vocab_size: int, rows: int) -> dict[str, st.SearchStrategy[Arg]]:
    V = vocab_size
    caches = sorted(get_registry().caches)
    Y, N, E = True, False, None  # valid, invalid, either
    return {
        "cache": st.one_of(
            st.sampled_from([*caches, "none"]).map(Arg),
            _choices(("nope", N), (5, N), ("", N), (None, E), ("dense(", N), (["dense"], N)),
        ),
        "max_new_tokens": st.one_of(
            st.integers(0, _MAX_STEPS).map(Arg),
            _choices((-1, N), (1.5, N), ("3", N), (None, N), (True, E), (2**62, E), (10**6, E), (2**64, E)),
        ),
        "stop_tokens": st.one_of(
            st.lists(st.integers(0, V - 1), max_size=2).map(Arg),
            _choices(
                ([[0]] * rows, Y),
                ([V], E),
                ([-1], E),
                ([2**64], E),
                ([1.5], N),
                (["a"], N),
                (7, N),
                (None, E),
                ([[0]] * (rows + 1), N),
            ),
        ),
        "stop_strings": _choices(((), Y), (["a"], E), ("a", E), (7, N), (None, E), ([""], E), (["x", 5], N)),
        "include_stop_str_in_output": _choices((False, Y), (True, Y), ("yes", N), (1, N), (None, N)),
        "seed": st.one_of(
            st.integers(0, 2**63 - 1).map(Arg),
            _choices(
                (None, Y),
                (list(range(rows)), Y),
                (-1, E),
                (2**63, E),
                (2**64, E),
                (1.5, N),
                ("s", N),
                ([1.5] * rows, N),
                ([2**64] * rows, N),
                (list(range(rows + 1)), N),
                (True, E),
            ),
        ),
        "logprobs": st.one_of(
            st.integers(0, V).map(Arg),
            _choices((None, Y), (V + 1, N), (-1, N), (2.5, N), ("1", N), (True, E), (2**63, N)),
        ),
        "prompt_logprobs": st.one_of(
            st.integers(0, V).map(Arg),
            _choices(
                (None, Y), (V + 1, N), (-1, N), (2.5, N), ("1", N), (True, E), (2**63, N), (math.nan, N), ([1], N)
            ),
        ),
    }


def _bad_chains() -> st.SearchStrategy[Any]:
    return st.sampled_from([5, object(), [{"name": 5}], [{"name": "sample", "params": 3}], "", "nope", b"sample"])


@st.composite
def generate_cases(draw: st.DrawFn, samplers: Sequence[SamplerInfo] | None = None) -> GenerateCase:
    catalogue = tuple(samplers) if samplers is not None else registered_samplers()
    V = draw(st.sampled_from(_VOCAB_SIZES))
    model = ModelKey(
        V, draw(st.sampled_from(("float32", "float32", "bfloat16"))), draw(st.sampled_from(("learned", "rope"))),
        draw(st.sampled_from((None, 1))), draw(st.booleans()),
    )  # fmt: skip
    prompts = draw(_prompts(V))
    rows = _rows(prompts.value)
    # Every argument but max_new_tokens left out half the time (its default, 64, is past the model's context).
    kwargs = {k: draw(s) for k, s in _kwargs(V, rows).items() if k == "max_new_tokens" or draw(st.booleans())}
    strict = draw(st.booleans())
    if strict:  # half the cases run: edge and wrong values dropped, the chain's coverage kept
        kwargs = {k: a for k, a in kwargs.items() if a.valid}
        kwargs.setdefault("max_new_tokens", Arg(draw(st.integers(0, _MAX_STEPS))))
        if draw(st.booleans()):  # scored prompts in more of the cases that run: their result is checked
            kwargs.setdefault("prompt_logprobs", Arg(draw(st.integers(0, V))))
        prompts = prompts if prompts.valid else Arg([[0]] * rows)
    cache, steps = kwargs.get("cache"), kwargs.get("max_new_tokens")
    if cache is not None and cache.value == "none" and steps is not None and isinstance(steps.value, int):
        kwargs["max_new_tokens"] = Arg(min(steps.value, _MAX_STEPS))  # uncached, each step recomputes all
    form = draw(st.sampled_from(("chain", "string", "spec", "none", *(() if strict else ("bad",)))))
    bad = draw(_bad_chains()) if form == "bad" else None
    api = draw(st.sampled_from(("generate", "stream", *(f"decode:{name}" for name in get_registry().strategies))))
    options = draw(_strategy_options(api, V))
    return GenerateCase(model, api, prompts, draw(chain_draws(catalogue, V)), form, kwargs, bad, options)


def _strategy_options(api: str, vocab_size: int) -> st.SearchStrategy[dict[str, Any]]:
    """Options for a strategy from its parameter model (none for a strategy without one)."""
    name = api.partition("decode:")[2]
    if not name:
        return st.just({})
    return params_dicts(params_model(get_registry().strategies[name]), vocab_size)


def _chain_argument(case: GenerateCase) -> Any:
    if case.chain_form == "bad":
        return case.bad_chain
    if case.chain_form == "chain":
        return case.chain.chain()
    if case.chain_form == "string":
        return case.chain.text()
    if case.chain_form == "spec":
        return case.chain.spec()
    return None


def check_generate_case(case: GenerateCase, report: Report) -> None:
    """Run the case, check its tokens; exceptions propagate."""
    model = tiny_model(case.model)
    kwargs = {k: a.value for k, a in case.kwargs.items()}
    chain = _chain_argument(case)
    prompts = case.prompts.value
    before = prompts.clone() if isinstance(prompts, torch.Tensor) else None
    if case.api == "stream":
        events = dk.stream(model, prompts, chain=chain, **kwargs)
        tokens = [(e.token, e.logprobs) for e in events]
        g = events.result
    else:
        strategy = case.api.partition("decode:")[2]
        if strategy:
            g = dk.decode(model, prompts, strategy=strategy, **{"chain": chain, **kwargs, **case.options})
        else:
            g = dk.generate(model, prompts, chain=chain, **kwargs)
        lps: list[list[Any]] = g.logprobs or [[None] * len(row) for row in g.tokens]
        tokens = [pair for row, row_lps in zip(g.tokens, lps) for pair in zip(row, row_lps)]
    if g is None:
        report.add(MALFORMED, f"{case.api}: no result once the stream ended")
    else:
        check_result(g, kwargs.get("logprobs"), kwargs.get("prompt_logprobs"), case.model.vocab_size, report)
        if kwargs.get("cache") != "int8":  # int8's prompt attends over its quantized keys (docs/caches.md): not exact
            check_prompt_scores(model, g, report)
    V = case.model.vocab_size
    for token, lp in tokens:
        if not isinstance(token, int) or not 0 <= token < V:
            report.add(OUT_OF_RANGE, f"{case.api}: token {token!r}")
        elif lp is not None and math.isnan(lp.processed):
            report.add(UNFLAGGED, f"{case.api}: a NaN row sampled")
        elif lp is not None and lp.processed == -math.inf:
            report.add(REVIVED, f"{case.api}: a removed token picked")
    if before is not None and not torch.equal(before, prompts):
        report.add(MUTATED, f"{case.api}: prompts")
    for arg in case.invalid():
        report.add(ACCEPTED_BAD, arg)


def check_result(
    g: Generation, logprobs: int | None, prompt_logprobs: int | None, vocab_size: int, report: Report
) -> None:
    """The shapes a `Generation` promises: per row one `TokenLogprobs` per token, each top list `logprobs` long
    (after the chain: at most); per prompt token one `PromptLogprobs`, the first None, ranks in [1, vocab_size]."""
    if (g.logprobs is None) != (logprobs is None):
        report.add(MALFORMED, f"logprobs={logprobs!r}, yet the result's logprobs is {_short(g.logprobs)}")
    for row, row_lps in zip(g.tokens, g.logprobs or []):
        if len(row_lps) != len(row):
            report.add(MALFORMED, f"logprobs: {len(row_lps)} for {len(row)} tokens")
        for lp in row_lps:
            if logprobs is not None and (len(lp.raw_top) != logprobs or len(lp.processed_top) > logprobs):
                report.add(MALFORMED, f"logprobs={logprobs}: top lists of {len(lp.raw_top)}, {len(lp.processed_top)}")
    if (g.prompt_logprobs is None) != (prompt_logprobs is None):
        report.add(MALFORMED, f"prompt_logprobs={prompt_logprobs!r}, yet the result's is {_short(g.prompt_logprobs)}")
    if g.prompt_logprobs is None or prompt_logprobs is None:
        return
    if len(g.prompt_logprobs) != len(g.prompt_tokens):
        report.add(MALFORMED, f"prompt_logprobs: {len(g.prompt_logprobs)} rows for {len(g.prompt_tokens)} prompts")
    for prompt, scores in zip(g.prompt_tokens, g.prompt_logprobs):
        if len(scores) != len(prompt) or (scores and scores[0] is not None):
            report.add(MALFORMED, f"prompt_logprobs: {len(scores)} entries for {len(prompt)} tokens, first not None")
        for token, p in zip(prompt[1:], scores[1:]):
            for problem in _prompt_score_problems(token, p, prompt_logprobs, vocab_size):
                report.add(MALFORMED, f"prompt_logprobs: {problem}")


@torch.no_grad()
def check_prompt_scores(model: TinyLM, g: Generation, report: Report) -> None:
    """Each prompt's scores against one uncached forward of that prompt alone (a second implementation: no cache,
    no padding, no strategy); within the model dtype's rounding."""
    tol = 1e-3 if next(model.parameters()).dtype == torch.float32 else 0.1
    for prompt, scores in zip(g.prompt_tokens, g.prompt_logprobs or []):
        ids = torch.tensor([prompt])
        lp = torch.log_softmax(model(ids, torch.arange(len(prompt))[None])[0].float(), -1)
        for i, p in enumerate(scores[1 : len(prompt)], 1):
            if p is not None and abs(p.logprob - lp[i - 1, prompt[i]].item()) > tol:
                report.add(MISMATCH, f"prompt_logprobs: {p.logprob} where one forward gives {lp[i - 1, prompt[i]]}")


def _prompt_score_problems(token: int, p: Any, n: int, vocab_size: int) -> list[str]:
    """What is wrong with one prompt token's score (rank, top list, values); nothing when it holds."""
    if p is None:
        return ["None past the first token"]
    values = [v for _, v in p.top]
    problems = [
        f"rank {p.rank} outside [1, {vocab_size}]" * (not 1 <= p.rank <= vocab_size),
        f"top list of {len(p.top)}, {n} asked" * (len(p.top) != n),
        f"logprob {p.logprob} not finite or > 0" * (not -math.inf < p.logprob <= 1e-5),
        "top not sorted" * (values != sorted(values, reverse=True)),
        "top ids out of range" * any(not 0 <= i < vocab_size for i, _ in p.top),
    ]
    if values:  # rank 1: nothing strictly above the token, so the top's first is its value (within rounding)
        best = values[0] - p.logprob <= 1e-5 * max(1.0, abs(values[0])) if p.rank == 1 else values[0] > p.logprob
        problems.append(f"rank {p.rank}, top {values[0]}, logprob {p.logprob}" * (not best))
    return [x for x in problems if x]

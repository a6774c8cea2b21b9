"""The chain target: random chains of the registered samplers, built in code, from the string form
and from a spec, run on adversarial logits and histories, every property checked on each stage."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from decodekit.chain import Chain, _at_least_float32
from decodekit.context import DecodeContext
from decodekit.errors import NumericsError
from decodekit.plugins import create
from decodekit.testing.fuzz.catalogue import SamplerInfo, registered_samplers
from decodekit.testing.fuzz.inputs import History, Logits, histories, logits, vocab_sizes
from decodekit.testing.fuzz.outcomes import (
    CONTRACT,
    INF_MADE,
    MISMATCH,
    MUTATED,
    NAN_MADE,
    OUT_OF_RANGE,
    REVIVED,
    ROUND_TRIP,
    UNFLAGGED,
    Report,
    blame,
)
from decodekit.testing.fuzz.values import params_dicts

__all__ = ["ChainCase", "ChainDraw", "StageDraw", "chain_cases", "chain_draws", "check_chain_case"]

ROUTES = ("code", "string", "spec", "json")
_MAX_PROCESSORS = 4


@dataclass(frozen=True)
class StageDraw:
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def code(self) -> str:
        """The stage in the chain-string form, keyword arguments written with `repr`."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}({args})" if args else self.name


@dataclass(frozen=True)
class ChainDraw:
    """Processors and maybe a selector, and how to build the chain from them (one of `ROUTES`)."""

    processors: tuple[StageDraw, ...]
    selector: StageDraw | None
    route: str

    def stages(self) -> list[StageDraw]:
        return [*self.processors, *([self.selector] if self.selector else [])]

    def names(self) -> list[str]:
        return [s.name for s in self.stages()]

    def text(self) -> str:
        return " | ".join(s.code() for s in self.stages()) or "sample"

    def spec(self) -> list[dict[str, Any]]:
        return [{"name": s.name, "params": s.params} for s in self.stages()]

    def chain(self) -> Chain:
        if self.route == "code":
            selector = create(self.selector.name, **self.selector.params) if self.selector else None
            return Chain([create(s.name, **s.params) for s in self.processors], selector=selector)
        if self.route == "string":
            return Chain.parse(self.text())
        if self.route == "json":
            try:
                return Chain.from_spec(json.dumps(self.spec()))
            except (TypeError, ValueError):  # a drawn value JSON cannot hold: the spec route instead
                pass
        return Chain.from_spec(self.spec())


@dataclass(frozen=True)
class ChainCase:
    draw: ChainDraw
    logits: Logits
    history: History

    def names(self) -> list[str]:
        return self.draw.names()


@st.composite
def stage_draws(draw: st.DrawFn, sampler: SamplerInfo, vocab_size: int) -> StageDraw:
    return StageDraw(sampler.name, draw(params_dicts(sampler.params_model, vocab_size)))


@st.composite
def chain_draws(draw: st.DrawFn, catalogue: Sequence[SamplerInfo], vocab_size: int) -> ChainDraw:
    """Up to four processors and, two times in three, a selector, with parameters for `vocab_size`."""
    processors = [s for s in catalogue if s.kind != "selector"]
    selectors = [s for s in catalogue if s.kind == "selector"]
    n = draw(st.integers(0, _MAX_PROCESSORS)) if processors else 0
    stages = tuple(draw(stage_draws(draw(st.sampled_from(processors)), vocab_size)) for _ in range(n))
    selector = None
    if selectors and draw(st.integers(0, 2)) > 0:  # a selector two times in three; else the default
        selector = draw(stage_draws(draw(st.sampled_from(selectors)), vocab_size))
    return ChainDraw(stages, selector, draw(st.sampled_from(ROUTES)))


@st.composite
def chain_cases(draw: st.DrawFn, samplers: Sequence[SamplerInfo] | None = None) -> ChainCase:
    """A chain, logits `[B, V]` for it and a history."""
    catalogue = tuple(samplers) if samplers is not None else registered_samplers()
    V, B = draw(vocab_sizes()), draw(st.integers(1, 4))
    return ChainCase(draw(chain_draws(catalogue, V)), draw(logits(V, B)), draw(histories(V, B)))


def check_chain_case(case: ChainCase, report: Report) -> None:
    """Build the chain, check it round-trips, run it on the case's logits; exceptions propagate."""
    chain = case.draw.chain()
    check_round_trip(chain, report)
    check_logits(chain, case.logits.tensor(), case.history.context(), report)


# -- round trips ---------------------------------------------------------------------


def check_round_trip(chain: Chain, report: Report) -> None:
    """Each stage alone rebuilds from its spec, its spec's JSON and its string form."""
    for stage in (*chain.processors, chain.selector):
        one = Chain([stage]) if stage is not chain.selector else Chain(selector=stage)
        name = _name(stage)
        try:
            if Chain.from_spec(one.to_spec()) != one:
                report.add(ROUND_TRIP, f"{name}: from_spec(to_spec())")
            if Chain.from_spec(json.loads(json.dumps(one.to_spec()))) != one:
                report.add(ROUND_TRIP, f"{name}: through JSON")
            if Chain.parse(str(one)) != one:
                report.add(ROUND_TRIP, f"{name}: parse(str())")
        except Exception as exc:  # every error here is a failure: the chain was built, so it must rebuild
            report.add(ROUND_TRIP, f"{name}: {type(exc).__name__} at {blame(exc.__traceback__)}")


# -- running -------------------------------------------------------------------------


def _name(stage: object) -> str:
    return str(getattr(stage, "name", None) or getattr(stage, "__name__", None) or type(stage).__name__)


def _bits(x: Tensor) -> Tensor:
    """`x`'s bits as integers: equal exactly when the tensors are, NaN payloads included."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return x.contiguous().view(ints).clone()


def _unsampleable(x: Tensor) -> Tensor:
    """`[B]`: rows with a NaN, a +inf, or no token left."""
    return torch.isnan(x).any(-1) | torch.isposinf(x).any(-1) | torch.isneginf(x).all(-1)


def check_logits(chain: Chain, logits: Tensor, ctx: DecodeContext, report: Report) -> None:
    """Each processor on its own; the fast path against the dense one; the selector's tokens, from
    `select` (the decode step) and from the chain's call (the step with its -1 rows settled)."""
    before, history = _bits(logits), ctx.tokens.clone()
    dense = run_dense(chain, logits, ctx.fork(), report)  # each stage's contract, in the logits' dtype
    if dense is None:
        return
    x = _at_least_float32(logits)  # the chain runs half logits in float32 (`step`, `process`)
    if x is not logits:
        dense = chain.process(x, ctx.fork())
    V = logits.shape[-1]
    as_dense = _densify(chain._process_fast(x, ctx.fork()), V, report, "process_fast")
    if as_dense is not None:
        compare(dense, as_dense, report, "process_fast")
    selector = _name(chain.selector)
    check_tokens(chain._select(x.clone(), ctx.fork()), dense, report, selector)
    try:
        check_tokens(chain(logits.clone(), ctx.fork()), dense, report, selector)
    except NumericsError:
        if not bool(_unsampleable(dense).any()):
            report.add(CONTRACT, "NumericsError for rows chain.process can sample")
    if not torch.equal(_bits(logits), before):
        report.add(MUTATED, "logits, by the chain's fast path")
    if not torch.equal(ctx.tokens, history):
        report.add(MUTATED, "history")


def run_dense(chain: Chain, logits: Tensor, ctx: DecodeContext, report: Report) -> Tensor | None:
    """`chain.process`, one stage at a time, checking each; None when a stage broke the shape."""
    x = logits
    for p in chain.processors:
        name, before = _name(p), _bits(x)
        y = p(x, ctx)
        if not torch.equal(_bits(x), before):
            report.add(MUTATED, name)
        if not isinstance(y, Tensor) or y.shape != x.shape:
            report.add(CONTRACT, f"{name}: returned {type(y).__name__} {tuple(getattr(y, 'shape', ()))}")
            return None
        if y.dtype != x.dtype:
            report.add(CONTRACT, f"{name}: returned {y.dtype} for {x.dtype}")
        clean = ~torch.isnan(x).any(-1, keepdim=True)  # a NaN row cannot be sampled anyway
        if bool((torch.isneginf(x) & ~torch.isneginf(y) & clean).any()):
            report.add(REVIVED, name)
        finite = clean & ~torch.isposinf(x).any(-1, keepdim=True)
        if bool((torch.isnan(y) & finite).any()):
            report.add(NAN_MADE, name)
        if bool((torch.isposinf(y) & finite).any()):
            report.add(INF_MADE, name)
        x = y
    return x


def _densify(x: object, vocab_size: int, report: Report, what: str) -> Tensor | None:
    """The `[B, V]` logits a fast-path result stands for; None (and a finding) for a malformed candidate set."""
    if isinstance(x, Tensor):
        return x
    values, indices = getattr(x, "values", None), getattr(x, "indices", None)
    if not isinstance(values, Tensor) or not isinstance(indices, Tensor) or values.shape != indices.shape:
        report.add(CONTRACT, f"{what}: returned {type(x).__name__}")
        return None
    if indices.numel() and not bool(((indices >= 0) & (indices < vocab_size)).all()):
        report.add(OUT_OF_RANGE, f"{what}: candidate ids")
        return None
    out = torch.full((values.shape[0], vocab_size), float("-inf"), dtype=values.dtype)
    return out.scatter_(1, indices, values)


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return (1e-2, 1e-2) if dtype in (torch.float16, torch.bfloat16) else (1e-5, 1e-6)


def compare(dense: Tensor, fast: Tensor, report: Report, what: str) -> None:
    """Every row the fast path can sample equals the dense row: the same tokens removed, the kept
    logits close. (A row it cannot sample, the chain may redo densely: its call is checked for that.)"""
    if fast.shape != dense.shape:
        report.add(MISMATCH, f"{what}: shape {tuple(fast.shape)}")
        return
    d_bad, f_bad = _unsampleable(dense), _unsampleable(fast)
    if bool((d_bad & ~f_bad).any()):
        report.add(MISMATCH, f"{what}: a row only the fast path can sample")
    ok = ~(d_bad | f_bad)
    d, f = dense[ok], fast[ok]
    if not torch.equal(torch.isneginf(d), torch.isneginf(f)):
        report.add(MISMATCH, f"{what}: removed tokens differ")
        return
    kept = ~torch.isneginf(d)
    rtol, atol = _tolerance(dense.dtype)
    if not torch.allclose(d[kept].double(), f[kept].double(), rtol=rtol, atol=atol):
        report.add(MISMATCH, f"{what}: kept logits differ")


def check_tokens(tokens: object, dense: Tensor, report: Report, selector: str) -> None:
    """Ids `[B]` in `[0, V)`, -1 for every row that cannot be sampled, never a removed token."""
    B, V = dense.shape
    if not isinstance(tokens, Tensor) or tokens.shape != (B,) or tokens.dtype != torch.long:
        report.add(CONTRACT, f"{selector}: returned {type(tokens).__name__} {getattr(tokens, 'dtype', '')}")
        return
    bad = _unsampleable(dense)
    marked = tokens == -1
    if bool(((tokens < -1) | (tokens >= V)).any()):
        report.add(OUT_OF_RANGE, selector)
        return
    if bool((~marked & bad).any()):
        report.add(UNFLAGGED, selector)
    picked = dense.gather(1, tokens.clamp(min=0)[:, None])[:, 0]
    if bool((~marked & ~bad & torch.isneginf(picked)).any()):
        report.add(REVIVED, f"{selector} picked a removed token")

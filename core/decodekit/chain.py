"""`Chain`: the logits-processor pipeline, an ordered list of processors plus one selector, in the user's order;
its step takes the candidate fast path, and gives what every stage on the full vocabulary gives (docs/concepts.md)."""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

try:
    from torch.fx.experimental.sym_node import DynamicInt as _DynamicInt
except ImportError:  # torch before 2.9
    _DynamicInt = None  # type: ignore[assignment, misc]

from decodekit import compiling
from decodekit.chain_string import parse_chain_string
from decodekit.context import DecodeContext
from decodekit.errors import ChainSpecError, NumericsError, ParameterError
from decodekit.param_types import shown, words
from decodekit.params import Params
from decodekit.plugins import build_stage, create, get_registry, sampler_call, sampler_entry
from decodekit.registry import Entry
from decodekit.results import TokenLogprobs, token_logprobs
from decodekit.sample import Sample
from decodekit.stage import Candidates, SelectorBase, Stage, densify

__all__ = ["Chain", "Picked", "Processor", "Selector", "parse_chain_string", "stage_label"]


@runtime_checkable
class Processor(Protocol):
    """`processor(logits [B, V], ctx) -> logits [B, V]`; pure, -inf means removed."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor: ...


@runtime_checkable
class Selector(Protocol):
    """`selector(logits [B, V], ctx) -> LongTensor [B]`."""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor: ...


_ToCandidates = Callable[[Tensor, DecodeContext], "Candidates | None"]
_OnCandidates = Callable[[Candidates, DecodeContext], Candidates]
_SelectCandidates = Callable[[Candidates, DecodeContext], Tensor]
_Verdict = Callable[[int, Sequence[int]], "str | None"]  # a stage's `ends_row` or `unfinished`


def stage_label(stage: object, *, every: bool = True) -> str:
    """A stage as a chain string writes it: `name(k=v, ...)` with every parameter, or (`every=False`) only those
    that differ from their defaults; its name alone where that leaves none; a plain callable by its `__name__`."""
    if isinstance(stage, Stage):
        params = stage.params.model_dump(exclude_defaults=not every)
        return f"{stage.name}({', '.join(f'{k}={v!r}' for k, v in params.items())})" if params else stage.name
    return getattr(stage, "__name__", repr(stage))


class Chain:
    """An ordered list of processors and one selector (default: `sample`; a `SelectorBase` last among `processors`
    is taken as it: `Chain([top_k, greedy])`)."""

    def __init__(self, processors: Iterable[Processor] = (), selector: Selector | None = None) -> None:
        procs = list(processors)
        if selector is None and procs and isinstance(procs[-1], SelectorBase):
            selector = procs.pop()
        _check_stages(procs, selector)
        self.processors: tuple[Processor, ...] = tuple(procs)
        self.selector: Selector = selector if selector is not None else Sample()
        # The fast-path methods, looked up once here rather than on every step.
        self._to_candidates: list[_ToCandidates | None] = [getattr(p, "to_candidates", None) for p in procs]
        self._on_candidates: list[_OnCandidates | None] = [getattr(p, "on_candidates", None) for p in procs]
        self._select_candidates: _SelectCandidates | None = getattr(self.selector, "select_candidates", None)
        # Only a candidate set can leave a row for the dense path to redo.
        self.may_redo = any(to_c is not None for to_c in self._to_candidates)
        stages = (*procs, self.selector)
        # Stages that can end a row after a token (a grammar that is complete): `ends_row(row, generated)`.
        self._enders: list[_Verdict] = [e for s in stages if callable(e := getattr(s, "ends_row", None))]
        # ... and what such a stage says of a row that ended otherwise: `unfinished(row, generated)`.
        self._unfinished: list[_Verdict] = [u for s in stages if callable(u := getattr(s, "unfinished", None))]
        self._compiled: Chain | None = None

    # -- construction from specs and strings -------------------------------------------

    @classmethod
    def from_spec(cls, spec: Sequence[Any] | str) -> Chain:
        """Build from a list of `{"name": ..., "params": {...}}` or of names (`"greedy"`, params left out), or a JSON
        string of one."""
        if isinstance(spec, str):
            try:
                spec = json.loads(spec)
            except json.JSONDecodeError as exc:
                raise ChainSpecError(f"chain spec: not valid JSON: {exc}") from None
            except RecursionError:  # json nests by recursion; Python's limit is the depth limit
                raise ChainSpecError("chain spec: JSON nested too deeply; allowed: a list of stage objects") from None
        if not isinstance(spec, Sequence) or isinstance(spec, str):
            raise ChainSpecError(f"chain spec: {shown(spec)}; allowed: a list of stage objects")
        return cls._from_stages([_spec_stage(i, item) for i, item in enumerate(spec)])

    @classmethod
    def parse(cls, text: str) -> Chain:
        """Build from `"name(arg, key=value) | name | ..."`; positional values fill parameters in order. A text is
        parsed and its parameters checked once per registry (`Registry.built`); every chain gets new stages."""
        read = functools.partial(_stage_calls, text)
        calls = get_registry().built(("chain", text), read) if isinstance(text, str) else read()  # else: the error
        return cls._from_stages([build_stage(entry, params) for entry, params in calls])

    @classmethod
    def _from_stages(cls, stages: list[Any]) -> Chain:
        selector = stages.pop() if stages and sampler_entry(stages[-1].name).kind == "selector" else None
        for i, s in enumerate(stages):
            if sampler_entry(s.name).kind == "selector":
                raise ChainSpecError(f"chain: stage {i} ({s!r}) is a selector; only the last stage may be one")
        return cls(stages, selector=selector)

    def to_spec(self) -> list[dict[str, Any]]:
        """The JSON-serialisable spec; `Chain.from_spec(chain.to_spec())` rebuilds the same chain."""
        out = []
        for stage in (*self.processors, self.selector):
            if not isinstance(stage, Stage):
                raise ChainSpecError(
                    f"chain: stage {stage!r} is not a registered sampler; only registered samplers serialise"
                )
            out.append(stage.spec())
        return out

    def __str__(self) -> str:
        """The one-line form, e.g. `temperature(value=0.8) | sample`; `Chain.parse` reads it back."""
        return " | ".join(stage_label(s) for s in (*self.processors, self.selector))

    def __repr__(self) -> str:
        return f"Chain({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Chain):
            return NotImplemented
        try:
            return self.to_spec() == other.to_spec()
        except ChainSpecError:
            return self is other

    __hash__ = None  # type: ignore[assignment]

    # -- running -----------------------------------------------------------------------

    def init_state(self, ctx: DecodeContext) -> None:
        """Create each stateful stage's per-generation state in `ctx` (the decode loop calls this)."""
        for stage in (*self.processors, self.selector):
            if isinstance(stage, Stage):
                ctx.state_for(stage)

    def process(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        """Run every processor on the full vocabulary, in float32 at least as `step` does: `[B, V] -> [B, V]`."""
        logits = _raw(logits, ctx)
        for p in self.processors:
            logits = p(logits, ctx)
        return logits

    def trace(self, logits: Tensor, ctx: DecodeContext) -> list[tuple[str, Tensor]]:
        """The logits after each stage, starting with the input: `[("input", x), (str(stage), x'), ...]`;
        in float32 at least, as `process`."""
        logits = _raw(logits, ctx)
        out = [("input", logits)]
        for p in self.processors:
            logits = p(logits, ctx)
            out.append((stage_label(p), logits))
        return out

    def step(
        self, logits: Tensor, ctx: DecodeContext, *, live: Sequence[bool] | None = None, logprobs: int | None = None
    ) -> Picked:
        """One decode step: a token per row of `logits` `[B, V]`, read back once (`Picked.ids`), what `process` and
        the selector give (docs/concepts.md, "The fast path"). A live row that cannot be sampled is a `NumericsError`;
        a row not `live` is never checked: its pick stands, or token 0 where it has none. `logprobs`: also the chosen
        token's log-probability and the top-n, raw and after the chain."""
        raw = _raw(logits, ctx)
        before = ctx.fork() if self.may_redo else None  # where a redo of the step starts
        if logprobs is None:
            processed: Tensor | Candidates | None = None
            tokens = self._select(raw, ctx)
        else:
            processed = self._process_fast(raw, ctx)
            tokens = self._pick(processed, raw.shape[-1], ctx)
        ids: list[int] = tokens.tolist()  # the step's one host read
        if min(ids) < 0:  # redo the step densely from `before`, whose draws and states `ctx` then adopts
            dense = None
            if before is not None:
                processed = dense = self.process(raw, before)
                tokens = self._pick(dense, raw.shape[-1], before)
                ctx.adopt(before)
            for row, token in enumerate(tokens.tolist()):
                if token < 0 and (live is None or live[row]):
                    dense = self.process(raw, ctx.fork()) if dense is None else dense
                    raise numerics_error(raw, dense, row, ctx.step, self._removers(raw, row, ctx))
            tokens = tokens.clamp(min=0)  # a finished row's token is never read
            ids = tokens.tolist()
        # a step redone densely has `processed` whether or not logprobs were asked: scored only when they were
        lps = None if processed is None or logprobs is None else token_logprobs(raw, processed, tokens, logprobs)
        return Picked(tokens, ids, lps)

    def distribution(self, logits: Tensor, ctx: DecodeContext, *, live: Sequence[bool] | None = None) -> Tensor:
        """The processed logits `[B, V]` (float32 at least) as `process` gives them, by the fast path where it can.

        For callers that pick themselves (beam search, speculative, transformers' `generate`); a live row
        that cannot be sampled is a `NumericsError`, as in `step`."""
        raw = _raw(logits, ctx)
        before = ctx.fork() if self.may_redo else None
        x = self._process_fast(raw, ctx)
        out = densify(x, raw.shape[-1]) if isinstance(x, Candidates) else x
        marked = [row for row, ok in enumerate(_finite(out.amax(-1)).tolist()) if not ok]
        if marked and before is not None:  # a candidate set may have marked it (a dead row too: NaN): redo densely
            out = self.process(raw, before)
            ctx.adopt(before)
            marked = [row for row, ok in enumerate(_finite(out.amax(-1)).tolist()) if not ok and row in marked]
        bad = [row for row in marked if live is None or live[row]]
        if bad:
            raise numerics_error(raw, out, bad[0], ctx.step, self._removers(raw, bad[0], before or ctx))
        return out

    @property
    def ends_rows(self) -> bool:
        """Whether a stage of the chain can end a row (`ended`)."""
        return bool(self._enders)

    def ended(self, row: int, generated: Sequence[int]) -> str | None:
        """What ends row `row` (its prompt's index) now that it has generated `generated`: the first reason a
        stage's `ends_row(row, generated)` gives, or None (docs/concepts.md: a stage may also end a row)."""
        return next((reason for ender in self._enders if (reason := ender(row, generated)) is not None), None)

    def unfinished(self, row: int, generated: Sequence[int]) -> list[str]:
        """What the stages that end rows say of row `row`, which ended on `generated` without them (at
        `max_new_tokens`, a stop token or string): e.g. "json_schema incomplete". The engine warns with it."""
        return [what for said in self._unfinished if (what := said(row, generated)) is not None]

    def compiled(self) -> Chain:
        """This chain with its step under `torch.compile` (`compile=True`): one graph for the whole fast
        step (the uniforms are drawn before it), token for token the eager chain's."""
        if self._compiled is None:
            with compiling.MAKING:  # once per chain, whatever the threads asking: each would compile anew
                if self._compiled is None:
                    self._compiled = self._compile()
        return self._compiled

    def _compile(self) -> Chain:
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        # Not dynamic=True: it breaks a truncation's plan, made from the vocabulary size. cpp_wrapper halves
        # a small CPU step; the chain's guards stay, or another chain runs this graph (docs/benchmarks.md).
        options: dict[str, Any] = {"cpp_wrapper": True, "guard_filter_fn": _guards_on_the_inputs}
        step = compiling.compiled(self._select, "the chain's step", dynamic=None, options=options)

        def select(logits: Tensor, ctx: DecodeContext) -> Tensor:
            # The history grows a column a step, and `ctx.step` counts: both dynamic from the first graph, not
            # recompiled at the second step (dynamo takes a plain int as a constant in its first graph; torch
            # before 2.9 has no `DynamicInt`, and compiles one graph more).
            torch._dynamo.maybe_mark_dynamic(ctx.tokens, 1)
            # The vocabulary stays a constant: a truncation plans from it, and a second vocabulary size in the
            # process (another model) made it a symbol that the plan cannot trace (a graph break every step).
            torch._dynamo.mark_static(logits, 1)
            count = ctx.step
            ctx.step = count if _DynamicInt is None else _DynamicInt(count)
            try:
                return step(logits, ctx)
            finally:
                ctx.step = count

        twin._select = select  # type: ignore[method-assign]
        return twin

    # -- the fast path, inside the step ------------------------------------------------------

    def _process_fast(self, logits: Tensor, ctx: DecodeContext) -> Tensor | Candidates:
        """The processors, on candidates once a stage has truncated and the next can follow: `process` (as
        `densify` shows) but on the rows a candidate set could not hold, which are NaN. No host read."""
        x: Tensor | Candidates = logits
        for p, to_c, on_c in zip(self.processors, self._to_candidates, self._on_candidates):
            if isinstance(x, Candidates):
                if on_c is not None:
                    x = on_c(x, ctx)
                    continue
                x = densify(x, logits.shape[-1])
            c = None if to_c is None else to_c(x, ctx)
            x = p(x, ctx) if c is None else c
        return x

    def _select(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        """Token ids `[B]`, -1 for a row it could not pick (`step` settles it). No host read."""
        return self._pick(self._process_fast(logits, ctx), logits.shape[-1], ctx)

    def _pick(self, x: Tensor | Candidates, vocab_size: int, ctx: DecodeContext) -> Tensor:
        """The selector on processed logits or candidates; -1 for a row whose maximum is not finite
        (a NaN logit, +inf, every token removed): the one check of unsampleable rows."""
        if isinstance(x, Candidates):
            if self._select_candidates is not None:
                tokens = self._select_candidates(x, ctx)
            else:
                tokens = self.selector(densify(x, vocab_size), ctx)
            top = x.values.amax(-1)
        else:
            tokens = self.selector(x, ctx)
            top = x.amax(-1)  # NaN anywhere in a row makes its max NaN
        return torch.where(_finite(top), tokens, -1)

    def _removers(self, logits: Tensor, row: int, ctx: DecodeContext) -> str:
        """Which stages removed row `row`'s last tokens: the one that left none, and the one before it that had
        narrowed them (a grammar, say, whose tokens a later `allowed_tokens` excludes). Traced on a fork."""
        fork, x, narrowed = ctx.fork(), logits, ""
        left = int((logits[row] > float("-inf")).sum())
        for i, p in enumerate(self.processors):
            x = p(x, fork)
            now = int((x[row] > float("-inf")).sum())
            name = f"stage {i} ({p.name if isinstance(p, Stage) else stage_label(p)})"
            if now == 0 and left > 0:
                return f"{name} removed the {left} left" + (f" by {narrowed}" if narrowed else "")
            if now < left:
                narrowed = name
            left = now
        return ""

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        """Token ids `[B]`; raises `NumericsError` naming the row when a row cannot be sampled."""
        return self.step(logits, ctx).tokens


def _check_stages(processors: Sequence[object], selector: object) -> None:
    """Refuse a chain whose processors are not callables that return logits, or whose selector is not a selector."""
    for i, p in enumerate(processors):
        if isinstance(p, SelectorBase):
            raise ChainSpecError(
                f"Chain: stage {i} ({p!r}) is a selector; a selector must be the last stage (or be given as selector=)"
            )
        if not callable(p):
            raise ChainSpecError(f"Chain: stage {i} ({p!r}) is not callable; allowed: processor(logits, ctx)")
    if selector is not None and not callable(selector):
        raise ChainSpecError(f"Chain: selector {selector!r} is not callable; allowed: selector(logits, ctx)")
    if isinstance(selector, Stage) and selector.kind != "selector":  # it would return logits, not tokens
        raise ChainSpecError(
            f"Chain: selector={selector!r} is a {selector.kind}; allowed: a selector (sample, greedy, ...), "
            f"or None for sample; a {selector.kind} goes in the list of processors"
        )


@dataclass(frozen=True)
class Picked:
    """What `Chain.step` picked: the tokens on the device and on the host, and their logprobs if asked."""

    tokens: Tensor  # [B] long
    ids: list[int]
    logprobs: list[TokenLogprobs] | None = None


_CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _guards_on_the_inputs(entries: Sequence[Any]) -> list[bool]:
    """Keep a compiled step's guards on its inputs (the logits, the context, the chain) and on global
    values; drop those on globals that are code (`G['torch']`, a function), which do not change under it.
    A global value a processor reads (the README's `newline_id`) is a constant in the graph: unguarded,
    a new value would run the old graph."""
    return [not (entry.is_global and entry.has_value and isinstance(entry.value, _CODE)) for entry in entries]


def _raw(logits: Tensor, ctx: DecodeContext) -> Tensor:
    """`logits` `[B, V]` for the context's B rows, in float32 at least."""
    if not isinstance(ctx, DecodeContext):  # transformers' processors take (input_ids, scores): a slip to name
        given = "ctx=None" if ctx is None else f"ctx of type {type(ctx).__name__}"
        raise ParameterError(
            f"{given} is invalid; allowed: a dk.DecodeContext (dk.DecodeContext(tokens=history [B, T])); in "
            "transformers' generate(), decodekit_hf.processor.as_logits_processor(chain)"
        )
    if logits.dim() != 2 or logits.shape[0] != ctx.tokens.shape[0]:
        raise ParameterError(
            f"logits of shape {tuple(logits.shape)} are invalid for a context of {ctx.tokens.shape[0]} rows; "
            f"allowed: [{ctx.tokens.shape[0]}, vocab_size]"
        )
    return _at_least_float32(logits)


def _at_least_float32(logits: Tensor) -> Tensor:
    """Half-precision logits in float32 (a chain works in float32 at least); float32 and float64 as they are."""
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def _finite(top: Tensor) -> Tensor:
    """Finite exactly where |top| < inf (NaN compares false): cheaper than torch.isfinite (docs/benchmarks.md)."""
    return top.abs() < float("inf")


def numerics_error(raw: Tensor, processed: Tensor, row: int, step: int, removers: str = "") -> NumericsError:
    """Explain why `row` could not be sampled at `step`; `removers`: which stages removed its last tokens."""
    if torch.isnan(raw[row]).any():
        why = "the model's logits contain NaN"
    elif torch.isnan(processed[row]).any():
        why = "the chain produced NaN"
    elif torch.isposinf(processed[row]).any():
        why = "the logits contain +inf"
    else:
        why = "every token was removed by the chain" + (f": {removers}" if removers else "")
    return NumericsError(f"step {step}, row {row}: cannot pick a token: {why}")


def _stage_calls(text: str) -> list[tuple[Entry, Params]]:
    """Each stage of a chain string: its sampler and checked parameters (`sampler_call`)."""
    return [sampler_call(name, args, kwargs) for name, args, kwargs in parse_chain_string(text)]


def _spec_stage(i: int, item: object) -> Any:
    """Build stage `i` of a spec: `"name"` or `{"name": str, "params": {str: value}}`."""
    if isinstance(item, str):
        item = {"name": item}
    allowed = words("{'name': str, 'params': {...}}", '{"name": a string, "params": an object}')
    if not isinstance(item, dict) or "name" not in item or set(item) - {"name", "params"}:
        # a list of stage objects, as transformers' LogitsProcessorList would be, wants dk.Chain
        obj, wrap = (", a stage object", " (stage objects: dk.Chain([...]))") if callable(item) else ("", "")
        raise ChainSpecError(f"chain spec: stage {i} is {shown(item)}{obj}; allowed: {allowed}{wrap}")
    name, params = item["name"], item.get("params") or {}
    if not isinstance(name, str):
        raise ChainSpecError(f"chain spec: stage {i} name is {shown(name)}; allowed: a string ({allowed})")
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ChainSpecError(f"chain spec: stage {i} params is {shown(params)}; allowed: an object with string keys")
    return create(name, **params)

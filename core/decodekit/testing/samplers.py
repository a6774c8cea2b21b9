"""Conformance checks for samplers: processors (`[B, V] -> [B, V]`) and selectors (`[B, V] -> [B]`).

Each `check_*` function raises `AssertionError` with a message naming the sampler, the row
and the tokens involved. `ProcessorConformance` and `SelectorConformance` turn them into
pytest tests: subclass one, define `make()` (or set `spec = (name, params)` for a registered
sampler), and the checks run against your sampler::

    class TestTopK(ProcessorConformance):
        dtypes = (torch.float32, torch.bfloat16)

        def make(self):
            return TopK(k=3)

What is checked, for a processor: shape, dtype and device kept; the input not modified;
-inf stays -inf; no NaN made; the same output for the same input; each row computed as if
it were alone in the batch (also for left-padded ragged histories at step > 0, where the
lone row has no padding at all) and independent of row order; and the candidate methods
(`to_candidates`, `on_candidates`, `to_candidates_after`, `monotone_map`) and the in-place
form (`process_`) agree with the dense call, on continuous logits and on logits with many
ties. For a selector: token ids `[B]` in range that are never -inf; the same tokens for
the same per-row seeds, whatever the other rows; `select_candidates` equal to the dense
call; -1 for rows that cannot be sampled when it promises to mark them
(`marks_unsampleable`); and, given the distribution it should draw from, a chi-square
goodness-of-fit test over many seeded draws.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, ClassVar

import torch
from torch import Tensor

from decodekit.context import DecodeContext, row_generators
from decodekit.stage import Candidates, Stage, densify

__all__ = [
    "DISTRIBUTION_LOGITS",
    "ContextFactory",
    "ProcessorConformance",
    "SelectorConformance",
    "TokenHistory",
    "assert_same_logits",
    "candidates_from",
    "check_candidates",
    "check_in_place",
    "check_monotone",
    "check_processor",
    "check_processor_contract",
    "check_rows_independent",
    "check_selector",
    "check_selector_candidates",
    "check_selector_contract",
    "check_selector_distribution",
    "check_selector_unsampleable",
    "check_spec_round_trip",
    "random_logits",
]

ContextFactory = Callable[..., DecodeContext]
"""Called as `factory(tokens=, prompt_lengths=, step=, generators=)`; `DecodeContext` itself by default."""

_HISTORY = 12  # columns of the token history the checks build
_STEP = 3  # generated tokens in the ragged history
_DRAWS = 20_000  # draws of the chi-square test
_MIN_P_VALUE = 1e-3


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing two computations of the same logits."""
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-2
    return 1e-5, 1e-6


# -- inputs ----------------------------------------------------------------------------


def random_logits(
    batch_size: int,
    vocab_size: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    ties: bool = False,
    removed: float = 0.25,
) -> Tensor:
    """Logits `[B, V]` ~ 3·N(0, 1), a fraction `removed` of each row -inf (never the whole row).

    `ties=True` rounds them to multiples of 1/2, so many tokens share a value, as with
    logits a model computed in bfloat16.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, vocab_size, generator=g) * 3
    if ties:
        x = (x * 2).round() / 2
    n_removed = min(int(removed * vocab_size), vocab_size - 1)
    if n_removed:
        cols = torch.rand(batch_size, vocab_size, generator=g).argsort(-1)[:, :n_removed]
        x.scatter_(1, cols, float("-inf"))
    return x.to(dtype)


def _row_seeds(seed: int, batch_size: int) -> list[int]:
    return [seed * 7919 + 101 * b + 1 for b in range(batch_size)]


class TokenHistory:
    """A token history `[B, T]` and a seed per row, from which the checks build contexts.

    Ragged: rows are left-padded with id 0 to different prompt lengths (one row unpadded,
    one with a 1-token prompt) and `step` tokens were generated. Id 0 is never a real token
    of the even rows and is one of every odd row, so counting padding as a token shows.
    """

    def __init__(self, batch_size: int, vocab_size: int, *, seed: int, ragged: bool) -> None:
        g = torch.Generator().manual_seed(seed + 1)
        B, T = batch_size, _HISTORY
        tokens = torch.randint(1, vocab_size, (B, T), generator=g)  # even rows: the pad id never occurs
        tokens[1::2, -2] = 0  # odd rows: id 0 is a real token too
        self.step = _STEP if ragged else 0
        self.prompt_lengths: Tensor | None = None
        if ragged:
            lengths = torch.randint(1, T - self.step + 1, (B,), generator=g)
            lengths[0] = T - self.step  # one row unpadded, one padded as far as possible
            lengths[-1] = 1
            pad = torch.arange(T) < (T - self.step - lengths)[:, None]
            tokens = tokens.masked_fill(pad, 0)
            self.prompt_lengths = lengths
        self.tokens = tokens
        self.seeds = _row_seeds(seed, B)

    def context(self, factory: ContextFactory, rows: Sequence[int] | None = None) -> DecodeContext:
        """A fresh context for all rows, or for `rows` in that order (a single row without padding)."""
        if rows is None:
            rows = range(self.tokens.shape[0])
        index = torch.tensor(list(rows), dtype=torch.long)
        tokens = self.tokens[index]
        lengths = None if self.prompt_lengths is None else self.prompt_lengths[index]
        if lengths is not None and len(index) == 1:  # a lone row: its real tokens only
            tokens = tokens[:, tokens.shape[1] - self.step - int(lengths[0]) :]
            lengths = None
        seeds = [self.seeds[r] for r in rows]
        return factory(
            tokens=tokens, prompt_lengths=lengths, step=self.step, generators=row_generators(seeds, len(seeds))
        )


def candidates_from(logits: Tensor, k: int, *, seed: int = 0) -> Candidates:
    """The k largest logits of each row as `Candidates`, tied values in a random token order.

    A stage must not rely on ties coming in token order: `torch.topk` promises no order.
    """
    g = torch.Generator().manual_seed(seed)
    shuffle = torch.randperm(logits.shape[1], generator=g)
    values, pos = logits[:, shuffle].sort(dim=-1, descending=True, stable=True)
    return Candidates(values[:, :k], shuffle[pos[:, :k]])


# -- comparisons -----------------------------------------------------------------------


def _first_rows(mask: Tensor) -> str:
    """The first few rows of `mask` `[B, ...]` with a True entry, as text."""
    rows = mask.reshape(mask.shape[0], -1).any(-1).nonzero().flatten().tolist()
    return ", ".join(str(r) for r in rows[:5])


def assert_same_logits(actual: Tensor, expected: Tensor, what: str, *, rtol: float, atol: float) -> None:
    """Same shape, the same tokens removed (-inf) and NaN, and the kept logits close."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    a_removed, e_removed = torch.isneginf(actual), torch.isneginf(expected)
    if not torch.equal(a_removed, e_removed):
        diff = a_removed != e_removed
        row = int(diff.nonzero()[0, 0])
        only_a = (a_removed[row] & ~e_removed[row]).nonzero().flatten().tolist()[:8]
        only_e = (e_removed[row] & ~a_removed[row]).nonzero().flatten().tolist()[:8]
        raise AssertionError(
            f"{what}: the removed (-inf) tokens differ in rows {_first_rows(diff)}; row {row}: "
            f"removed only in the result: {only_a}, only in the reference: {only_e}"
        )
    a_nan, e_nan = torch.isnan(actual), torch.isnan(expected)
    assert torch.equal(a_nan, e_nan), f"{what}: NaN at different tokens in rows {_first_rows(a_nan != e_nan)}"
    kept = ~(e_removed | e_nan)
    a, e = actual[kept].float(), expected[kept].float()
    if not torch.allclose(a, e, rtol=rtol, atol=atol):
        worst = int((a - e).abs().argmax())
        raise AssertionError(
            f"{what}: kept logits differ: {a[worst].item()!r} vs {e[worst].item()!r} "
            f"(max abs difference {(a - e).abs().max().item():.3g}, rtol={rtol}, atol={atol})"
        )


def _assert_candidates_valid(c: object, batch_size: int, vocab_size: int, dtype: torch.dtype, what: str) -> None:
    assert isinstance(c, Candidates), f"{what}: returned {type(c).__name__}, expected decodekit.Candidates"
    v, i = c.values, c.indices
    assert v.dim() == 2 and v.shape == i.shape and v.shape[0] == batch_size and v.shape[1] >= 1, (
        f"{what}: values {tuple(v.shape)} and indices {tuple(i.shape)}, expected both [{batch_size}, K], K >= 1"
    )
    assert v.dtype == dtype, f"{what}: values of dtype {v.dtype}, expected the logits' {dtype}"
    assert i.dtype == torch.long, f"{what}: indices of dtype {i.dtype}, expected torch.long"
    assert bool(((i >= 0) & (i < vocab_size)).all()), f"{what}: token ids outside [0, {vocab_size})"
    sorted_ids = i.sort(-1).values
    repeated = (sorted_ids[:, 1:] == sorted_ids[:, :-1]).any(-1)
    assert not bool(repeated.any()), f"{what}: a token id occurs twice in rows {_first_rows(repeated[:, None])}"
    unsorted = (v[:, 1:] > v[:, :-1]).any(-1)
    assert not bool(unsorted.any()), f"{what}: values not sorted descending in rows {_first_rows(unsorted[:, None])}"


# -- processors ------------------------------------------------------------------------


def check_spec_round_trip(stage: object) -> None:
    """A `Stage` describes itself as JSON and its class rebuilds the same stage from it."""
    if not isinstance(stage, Stage):
        return
    spec = stage.spec()
    assert json.loads(json.dumps(spec)) == spec, f"{stage!r}: spec() {spec!r} does not survive JSON"
    assert spec["name"] == stage.name, f"{stage!r}: spec() names {spec['name']!r}, expected {stage.name!r}"
    rebuilt = type(stage)(**spec["params"])
    assert rebuilt.spec() == spec, f"{stage!r}: rebuilt from its spec as {rebuilt.spec()!r}, expected {spec!r}"


def check_processor_contract(processor: Any, logits: Tensor, make_ctx: Callable[[], DecodeContext]) -> Tensor:
    """Shape, dtype and device kept; input untouched; -inf kept; no NaN; repeatable. Returns the output."""
    what = f"{processor!r} on {logits.dtype} logits {tuple(logits.shape)}"
    before = logits.clone()
    out = processor(logits, make_ctx())
    assert isinstance(out, Tensor), f"{what}: returned {type(out).__name__}, expected a Tensor"
    assert out.shape == logits.shape, f"{what}: output shape {tuple(out.shape)}, expected {tuple(logits.shape)}"
    assert out.dtype == logits.dtype, f"{what}: output dtype {out.dtype}, expected {logits.dtype}"
    assert out.device == logits.device, f"{what}: output on {out.device}, expected {logits.device}"
    assert torch.equal(logits, before), f"{what}: modified its input in place"
    revived = torch.isneginf(logits) & ~torch.isneginf(out)
    assert not bool(revived.any()), (
        f"{what}: revived removed (-inf) tokens in rows {_first_rows(revived)}, "
        f"e.g. token {int(revived.nonzero()[0, 1])}"
    )
    made_nan = torch.isnan(out) & ~torch.isnan(logits)
    assert not bool(made_nan.any()), f"{what}: produced NaN in rows {_first_rows(made_nan)}"
    again = processor(logits.clone(), make_ctx())
    assert_same_logits(again, out, f"{what}: a second call on the same input", rtol=0.0, atol=0.0)
    return out


def check_in_place(processor: Any, logits: Tensor, make_ctx: Callable[[], DecodeContext]) -> None:
    """`process_`, where defined, writes the call's result into its argument and returns it; the call
    itself returns its input or a tensor that shares no memory with it (the chain may overwrite that)."""
    process_ = getattr(processor, "process_", None)
    if process_ is None:
        return
    what = f"{processor!r}.process_ on {logits.dtype} logits {tuple(logits.shape)}"
    out = processor(logits, make_ctx())
    if out is not logits:
        assert out.untyped_storage().data_ptr() != logits.untyped_storage().data_ptr(), (
            f"{processor!r}: the call returned a view of its input; "
            "with process_ it must return its input or a new tensor"
        )
    target = logits.clone()
    result = process_(target, make_ctx())
    assert result is target, f"{what}: returned a different tensor, expected its argument, overwritten"
    assert_same_logits(target, out, f"{what} vs the call", rtol=0.0, atol=0.0)


def check_rows_independent(
    processor: Any, logits: Tensor, out: Tensor, history: TokenHistory, factory: ContextFactory
) -> None:
    """Row b of `out` (the whole batch's result) equals row b computed alone, and row order does not matter."""
    rtol, atol = _tolerance(logits.dtype)
    B = logits.shape[0]
    padded = "" if history.prompt_lengths is None else ", left-padded history"
    for b in range(B):
        alone = processor(logits[b : b + 1].clone(), history.context(factory, [b]))
        assert_same_logits(
            alone, out[b : b + 1], f"{processor!r}: row {b} alone vs in a batch of {B}{padded}", rtol=rtol, atol=atol
        )
    perm = list(range(B))[::-1]
    permuted = processor(logits[perm].clone(), history.context(factory, perm))
    assert_same_logits(
        permuted, out[perm], f"{processor!r}: rows reversed vs the batch's rows{padded}", rtol=rtol, atol=atol
    )


_MAPS: tuple[tuple[str, Callable[[Tensor], Tensor]], ...] = (
    ("x / 0.7", lambda x: x / 0.7),
    ("x * 1e-30 (makes ties)", lambda x: x * 1e-30),
    ("x > 0 as 0 or 1 (ties nearly everything)", lambda x: (x > 0).to(x.dtype)),
)


def check_monotone(processor: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """`monotone_map`, where defined: f(logits) is the call's result, f is non-decreasing and gives each
    element as it does in the whole tensor; `to_candidates_after`, where defined, equals
    `to_candidates` after the map, for maps that keep, make and merge ties."""
    monotone_map = getattr(processor, "monotone_map", None)
    if monotone_map is not None:
        what = f"{processor!r}.monotone_map on {logits.dtype} logits"
        f = monotone_map(history.context(factory))
        if f is not None:
            full = f(logits.clone())
            dense = processor(logits.clone(), history.context(factory))
            assert_same_logits(full, dense, f"{what}: f(logits) vs the call", rtol=0.0, atol=0.0)
            part = f(logits[:, 1 : logits.shape[1] // 2 + 2].clone())
            assert_same_logits(part, full[:, 1 : logits.shape[1] // 2 + 2], f"{what}: f on a slice", rtol=0.0, atol=0.0)
            ordered = logits.sort(-1).values
            mapped = f(ordered)
            assert not bool((mapped[:, 1:] < mapped[:, :-1]).any()), f"{what}: f is not non-decreasing"
    after = getattr(processor, "to_candidates_after", None)
    if after is not None:
        B, V = logits.shape
        for name, f in _MAPS:
            what = f"{processor!r}.to_candidates_after({name}) on {logits.dtype} logits"
            x = logits.clone()
            c = after(x, f, history.context(factory))
            assert torch.equal(x, logits), f"{what}: modified its input in place"
            if c is not None:
                _assert_candidates_valid(c, B, V, logits.dtype, what)
                dense = processor(f(logits.clone()), history.context(factory))
                assert_same_logits(densify(c, V), dense, f"{what} vs the call after the map", rtol=0.0, atol=0.0)


def check_candidates(processor: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """`to_candidates` and `on_candidates`, where defined, agree with the dense call."""
    rtol, atol = _tolerance(logits.dtype)
    B, V = logits.shape
    to_candidates = getattr(processor, "to_candidates", None)
    if to_candidates is not None:
        what = f"{processor!r}.to_candidates on {logits.dtype} logits"
        c = to_candidates(logits.clone(), history.context(factory))
        if c is not None:
            _assert_candidates_valid(c, B, V, logits.dtype, what)
            dense = processor(logits.clone(), history.context(factory))
            assert_same_logits(densify(c, V), dense, f"{what} vs the dense call", rtol=rtol, atol=atol)
    on_candidates = getattr(processor, "on_candidates", None)
    if on_candidates is not None:
        what = f"{processor!r}.on_candidates on {logits.dtype} candidates"
        values, indices = candidates_from(logits, max(2, V // 4))
        values[0, values.shape[1] // 2 :] = float("-inf")  # input candidates may end in -inf
        given = Candidates(values, indices)
        c = on_candidates(Candidates(values.clone(), indices.clone()), history.context(factory))
        assert torch.equal(given.values, values), f"{what}: modified the input candidates in place"
        _assert_candidates_valid(c, B, V, logits.dtype, what)
        dense = processor(densify(given, V), history.context(factory))
        assert_same_logits(densify(c, V), dense, f"{what} vs the dense call", rtol=rtol, atol=atol)


def _cases(
    batch_size: int, vocab_size: int, dtypes: Sequence[torch.dtype], seed: int, ragged: bool
) -> Iterator[tuple[Tensor, TokenHistory]]:
    """The logits the checks run on, continuous and tied, in each dtype, with a token history."""
    history = TokenHistory(batch_size, vocab_size, seed=seed, ragged=ragged)
    for dtype in dtypes:
        for ties in (False, True):
            yield random_logits(batch_size, vocab_size, seed=seed, dtype=dtype, ties=ties), history


def check_processor(
    processor: Any,
    *,
    vocab_size: int = 64,
    batch_size: int = 4,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    seed: int = 0,
    ctx_factory: ContextFactory | None = None,
) -> None:
    """Every processor check, for each dtype, on a plain and on a ragged left-padded history (step > 0)."""
    factory: ContextFactory = ctx_factory or DecodeContext
    check_spec_round_trip(processor)
    for ragged in (False, True):
        for logits, history in _cases(batch_size, vocab_size, dtypes, seed, ragged):
            out = check_processor_contract(processor, logits, partial(history.context, factory))
            check_rows_independent(processor, logits, out, history, factory)
            check_candidates(processor, logits, history, factory)
            check_monotone(processor, logits, history, factory)
            check_in_place(processor, logits, partial(history.context, factory))


# -- selectors -------------------------------------------------------------------------


def _selector_logits(batch_size: int, vocab_size: int, *, seed: int, dtype: torch.dtype) -> Tensor:
    """Logits with most tokens removed (at most 3 kept per row) and one row of extreme magnitude."""
    x = random_logits(batch_size, vocab_size, seed=seed, removed=max(0.0, 1 - 3 / vocab_size))
    x[-1] = x[-1] * 1e3  # |logits| in the thousands: exp overflows unless shifted; -inf stays -inf
    return x.to(dtype)


def check_selector_contract(selector: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> Tensor:
    """LongTensor `[B]` in range, never a removed token, repeatable, rows independent. Returns the tokens."""
    B, V = logits.shape
    what = f"{selector!r} on {logits.dtype} logits {tuple(logits.shape)}"
    before = logits.clone()
    tokens = selector(logits, history.context(factory))
    assert torch.equal(logits, before), f"{what}: modified its input in place"
    assert isinstance(tokens, Tensor) and tokens.dtype == torch.long, (
        f"{what}: returned {tokens!r}, expected a LongTensor"
    )
    assert tokens.shape == (B,), f"{what}: returned shape {tuple(tokens.shape)}, expected ({B},)"
    assert bool(((tokens >= 0) & (tokens < V)).all()), f"{what}: token ids {tokens.tolist()} outside [0, {V})"
    removed = torch.isneginf(logits.gather(1, tokens[:, None]))  # [B, 1]
    assert not bool(removed.any()), (
        f"{what}: picked a removed (-inf) token in rows {_first_rows(removed)}: {tokens.tolist()}"
    )
    again = selector(logits.clone(), history.context(factory))
    assert torch.equal(again, tokens), f"{what}: the same seeds gave {again.tolist()}, then {tokens.tolist()}"
    for b in range(B):
        alone = selector(logits[b : b + 1].clone(), history.context(factory, [b]))
        assert int(alone[0]) == int(tokens[b]), (
            f"{what}: row {b} picks {int(alone[0])} alone but {int(tokens[b])} in a batch of {B} (same row seed)"
        )
    perm = list(range(B))[::-1]
    permuted = selector(logits[perm].clone(), history.context(factory, perm))
    assert torch.equal(permuted, tokens[perm]), (
        f"{what}: rows reversed pick {permuted.tolist()}, expected {tokens[perm].tolist()}"
    )
    return tokens


def check_selector_candidates(selector: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """`select_candidates`, where defined, picks what the dense call picks on the same logits and seeds."""
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is None:
        return
    B, V = logits.shape
    c = candidates_from(logits, max(2, V // 4))
    what = f"{selector!r}.select_candidates on {logits.dtype} candidates {tuple(c.values.shape)}"
    fast = select_candidates(c, history.context(factory))
    assert isinstance(fast, Tensor) and fast.dtype == torch.long and fast.shape == (B,), (
        f"{what}: returned {fast!r}, expected a LongTensor [{B}]"
    )
    dense = selector(densify(c, V), history.context(factory))
    assert torch.equal(fast, dense), (
        f"{what}: picked {fast.tolist()}, the dense call on the same logits and seeds {dense.tolist()}"
    )


def check_selector_unsampleable(
    selector: Any, vocab_size: int, history: TokenHistory, factory: ContextFactory, dtype: torch.dtype, seed: int = 0
) -> None:
    """A selector with `marks_unsampleable = True` returns -1 exactly for the rows that cannot be
    sampled (a NaN logit, +inf, every token removed), dense and on candidates, and still picks
    the others' tokens."""
    if not getattr(selector, "marks_unsampleable", False):
        return
    B = history.tokens.shape[0]
    logits = _selector_logits(B, vocab_size, seed=seed, dtype=dtype)
    bad = {0: float("nan"), 1: float("inf")}  # one logit of row 0 NaN, one of row 1 +inf; row 2 all removed
    for row, value in bad.items():
        if row < B:
            logits[row, vocab_size // 3] = value
    if B > 2:
        logits[2] = float("-inf")
    expected = [-1 if b < 3 else None for b in range(B)]
    runs: list[tuple[str, Callable[[], Tensor]]] = [
        ("dense", lambda: selector(logits.clone(), history.context(factory)))
    ]
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is not None:
        c = candidates_from(logits, max(2, vocab_size // 4))
        runs.append(("select_candidates", lambda: select_candidates(c, history.context(factory))))
    for path, run in runs:
        tokens = run().tolist()
        what = f"{selector!r} ({path}, marks_unsampleable) on {dtype} logits"
        for b, (token, want) in enumerate(zip(tokens, expected)):
            if want is not None:
                assert token == want, f"{what}: row {b} cannot be sampled but got token {token}, expected -1"
            else:
                assert 0 <= token < vocab_size, f"{what}: row {b} got {token}, expected a token id"


DISTRIBUTION_LOGITS = torch.tensor([[2.0, 1.0, 0.5, float("-inf"), -1.0, 1.0]])
"""The default row of the chi-square test: a tie, a removed token, probabilities from 0.03 to 0.5."""


def check_selector_distribution(
    selector: Any,
    distribution: Callable[[Tensor], Tensor],
    *,
    logits: Tensor = DISTRIBUTION_LOGITS,
    draws: int = _DRAWS,
    seed: int = 0,
    ctx_factory: ContextFactory | None = None,
) -> None:
    """Chi-square goodness of fit of `draws` seeded picks, dense and on candidates, to `distribution(logits)`.

    logits: `[1, V]`. Categories expected fewer than 5 times are pooled; a token of
    probability 0 must never be drawn. Each draw is one row with its own generator.
    """
    from scipy.stats import chisquare

    factory: ContextFactory = ctx_factory or DecodeContext
    V = logits.shape[1]
    probs = distribution(logits).double()[0]
    assert probs.shape == (V,) and abs(float(probs.sum()) - 1) < 1e-6, f"distribution(logits) is {probs.tolist()}"
    expected = probs * draws
    finite = candidates_from(logits, int(torch.isfinite(logits).sum()), seed=seed)  # every finite token
    candidates = Candidates(finite.values.expand(draws, -1), finite.indices.expand(draws, -1))
    runs: list[tuple[str, Callable[[DecodeContext], Tensor]]] = [
        ("dense", lambda ctx: selector(logits.expand(draws, -1), ctx))
    ]
    select_candidates = getattr(selector, "select_candidates", None)
    if select_candidates is not None:
        runs.append(("select_candidates", lambda ctx: select_candidates(candidates, ctx)))
    for i, (path, run) in enumerate(runs):
        tokens = torch.zeros(draws, 1, dtype=torch.long)
        ctx = factory(tokens=tokens, prompt_lengths=None, step=0, generators=row_generators(seed + i, draws))
        counts = torch.bincount(run(ctx), minlength=V).double()
        what = f"{selector!r} ({path}), {draws} draws from {logits[0].tolist()}"
        impossible = (expected == 0) & (counts > 0)
        assert not bool(impossible.any()), (
            f"{what}: drew tokens of probability 0: {impossible.nonzero().flatten().tolist()}; counts {counts.tolist()}"
        )
        big = expected >= 5
        obs = torch.cat([counts[big], counts[~big].sum(-1, keepdim=True)])
        exp = torch.cat([expected[big], expected[~big].sum(-1, keepdim=True)])
        obs, exp = obs[exp > 0], exp[exp > 0]
        if len(exp) == 1:  # a deterministic selector: every draw is the one possible token
            assert float(obs[0]) == draws, f"{what}: counts {counts.tolist()}, expected {expected.tolist()}"
            continue
        p_value = float(chisquare(obs.numpy(), exp.numpy()).pvalue)
        assert p_value > _MIN_P_VALUE, (
            f"{what}: counts {counts.tolist()} do not fit the expected {[round(e, 1) for e in expected.tolist()]} "
            f"(chi-square p = {p_value:.2g} <= {_MIN_P_VALUE})"
        )


def check_selector(
    selector: Any,
    *,
    distribution: Callable[[Tensor], Tensor] | None = None,
    vocab_size: int = 64,
    batch_size: int = 4,
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    seed: int = 0,
    ctx_factory: ContextFactory | None = None,
) -> None:
    """Every selector check; the chi-square test too when `distribution` (logits -> probabilities) is given."""
    factory: ContextFactory = ctx_factory or DecodeContext
    check_spec_round_trip(selector)
    for ragged in (False, True):
        history = TokenHistory(batch_size, vocab_size, seed=seed, ragged=ragged)
        for dtype in dtypes:
            check_selector_contract(
                selector, _selector_logits(batch_size, vocab_size, seed=seed, dtype=dtype), history, factory
            )
    for logits, history in _cases(batch_size, vocab_size, dtypes, seed, ragged=False):
        check_selector_candidates(selector, logits, history, factory)
        check_selector_unsampleable(selector, vocab_size, history, factory, logits.dtype, seed)
    if distribution is not None:
        check_selector_distribution(selector, distribution, seed=seed, ctx_factory=factory)


# -- pytest suites ---------------------------------------------------------------------


class _Conformance:
    vocab_size: ClassVar[int] = 64
    batch_size: ClassVar[int] = 4
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32,)
    seed: ClassVar[int] = 0
    spec: ClassVar[tuple[str, dict[str, Any]] | None] = None  # (name, params) of a registered sampler

    def make(self) -> Any:
        """The sampler under test: `dk.create(name, **params)` for `spec = (name, params)`, or define make()."""
        if self.spec is None:
            raise NotImplementedError(f"{type(self).__name__} must set spec or define make() returning the sampler")
        from decodekit.plugins import create

        name, params = self.spec
        return create(name, **params)

    def make_context(self, **fields: Any) -> DecodeContext:
        """Wraps each history the checks build (tokens, prompt_lengths, step, generators) in a context."""
        return DecodeContext(**fields)

    def test_spec_round_trip(self) -> None:
        check_spec_round_trip(self.make())


class ProcessorConformance(_Conformance):
    """Subclass and define `make()`; every processor check runs as a pytest test."""

    def _each(self, ragged: bool, check: Callable[[Any, Tensor, TokenHistory], None]) -> None:
        processor = self.make()
        for logits, history in _cases(self.batch_size, self.vocab_size, self.dtypes, self.seed, ragged):
            check(processor, logits, history)

    def _contract_and_rows(self, processor: Any, logits: Tensor, history: TokenHistory) -> None:
        out = check_processor_contract(processor, logits, partial(history.context, self.make_context))
        check_rows_independent(processor, logits, out, history, self.make_context)

    def test_contract_and_rows_independent(self) -> None:
        self._each(False, self._contract_and_rows)

    def test_ragged_history(self) -> None:
        self._each(True, self._contract_and_rows)

    def test_candidates_agree_with_dense(self) -> None:
        for ragged in (False, True):
            self._each(ragged, lambda p, x, h: check_candidates(p, x, h, self.make_context))

    def test_monotone_map_and_candidates_after_agree(self) -> None:
        for ragged in (False, True):
            self._each(ragged, lambda p, x, h: check_monotone(p, x, h, self.make_context))

    def test_in_place_form_agrees(self) -> None:
        for ragged in (False, True):
            self._each(ragged, lambda p, x, h: check_in_place(p, x, partial(h.context, self.make_context)))


class SelectorConformance(_Conformance):
    """Subclass and define `make()` (and `distribution()` for the chi-square test)."""

    def distribution(self, logits: Tensor) -> Tensor | None:
        """The probabilities `[1, V]` the selector should draw from on `logits`; None skips the test."""
        return None

    def _history(self, ragged: bool) -> TokenHistory:
        return TokenHistory(self.batch_size, self.vocab_size, seed=self.seed, ragged=ragged)

    def test_contract_and_rows_independent(self) -> None:
        selector = self.make()
        for ragged in (False, True):
            for dtype in self.dtypes:
                logits = _selector_logits(self.batch_size, self.vocab_size, seed=self.seed, dtype=dtype)
                check_selector_contract(selector, logits, self._history(ragged), self.make_context)

    def test_candidates_agree_with_dense(self) -> None:
        selector = self.make()
        for logits, history in _cases(self.batch_size, self.vocab_size, self.dtypes, self.seed, False):
            check_selector_candidates(selector, logits, history, self.make_context)

    def test_unsampleable_rows_marked(self) -> None:
        selector = self.make()
        if not getattr(selector, "marks_unsampleable", False):
            import pytest

            pytest.skip("the selector does not mark unsampleable rows itself (the chain checks them)")
        for dtype in self.dtypes:
            check_selector_unsampleable(
                selector, self.vocab_size, self._history(False), self.make_context, dtype, self.seed
            )

    def test_distribution(self) -> None:
        import pytest

        if self.distribution(DISTRIBUTION_LOGITS) is None:
            pytest.skip("distribution() is not defined")
        check_selector_distribution(self.make(), self._distribution, seed=self.seed, ctx_factory=self.make_context)

    def _distribution(self, logits: Tensor) -> Tensor:
        probs = self.distribution(logits)
        assert probs is not None, f"{type(self).__name__}.distribution() returned None"
        return probs

"""Conformance checks for processors (`[B, V] -> [B, V]`) and their pytest suite.

What is checked, in every float dtype: shape, dtype and device kept; the input not modified;
-inf stays -inf; no NaN made; the same output for the same input; each row computed as if it
were alone in the batch (also for left-padded ragged histories at step > 0, where the lone row
has no padding at all) and independent of row order; a view as input (`logits[:, -1]` of a
model's output is one) gives what its contiguous copy gives; and the candidate methods
(`to_candidates`, `on_candidates`) agree with the dense call, on continuous and on tied logits; and
what a decode step calls reads nothing back from the device (`host_reads`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Unpack

from decodekit.context import DecodeContext
from decodekit.stage import Candidates, densify
from decodekit.testing.assertions import (
    NEW_TENSOR,
    ROW_DRAWS,
    assert_candidates_valid,
    assert_same_logits,
    first_rows,
    history_kept,
)
from decodekit.testing.host_reads import assert_reads_nothing
from decodekit.testing.inputs import NEG, ContextFactory, TokenHistory, candidates_from, has_ties, tolerance
from decodekit.testing.suite import (
    Conformance,
    KitOptions,
    KitSettings,
    check_spec_round_trip,
    each_fake_case,
    warn_unchecked,
)

__all__ = [
    "ProcessorConformance",
    "check_candidates",
    "check_processor",
    "check_processor_contract",
    "check_processor_reads_nothing",
    "check_rows_independent",
    "check_view_input",
]


def check_processor_contract(processor: Any, logits: Tensor, make_ctx: Callable[[], DecodeContext]) -> Tensor:
    """Shape, dtype and device kept; input untouched; -inf kept; no NaN; repeatable. Returns the output."""
    what = f"{processor!r} on {logits.dtype} logits {tuple(logits.shape)}"
    before, ctx = logits.clone(), make_ctx()
    kept = history_kept(ctx)
    out = processor(logits, ctx)
    kept(what)
    assert isinstance(out, Tensor), f"{what}: returned {type(out).__name__}, expected a Tensor"
    assert out.shape == logits.shape, f"{what}: output shape {tuple(out.shape)}, expected {tuple(logits.shape)}"
    assert out.dtype == logits.dtype, f"{what}: output dtype {out.dtype}, expected {logits.dtype}"
    assert out.device == logits.device, f"{what}: output on {out.device}, expected {logits.device}"
    assert torch.equal(logits, before), f"{what}: modified its input in place; allowed: {NEW_TENSOR}"
    revived = torch.isneginf(logits) & ~torch.isneginf(out)
    assert not bool(revived.any()), (
        f"{what}: revived removed (-inf) tokens in rows {first_rows(revived)}, "
        f"e.g. token {int(revived.nonzero()[0, 1])}"
    )
    made_nan = torch.isnan(out) & ~torch.isnan(logits)
    assert not bool(made_nan.any()), f"{what}: produced NaN in rows {first_rows(made_nan)}"
    again = processor(logits.clone(), make_ctx())
    assert_same_logits(
        again, out, f"{what}: a second call on the same input and seeds ({ROW_DRAWS})", rtol=0.0, atol=0.0
    )
    return out


def check_rows_independent(
    processor: Any, logits: Tensor, out: Tensor, history: TokenHistory, factory: ContextFactory
) -> None:
    """Row b of `out` (the whole batch's result) equals row b computed alone, and row order does not matter."""
    rtol, atol = tolerance(logits.dtype)
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


def check_view_input(processor: Any, logits: Tensor, make_ctx: Callable[[], DecodeContext]) -> None:
    """A strided view as input (every other column of a wider tensor) gives what its contiguous copy gives,
    and is left untouched."""
    wide = torch.stack([logits, torch.zeros_like(logits)], -1)  # [B, V, 2]
    view = wide[..., 0]  # [B, V], column stride 2
    what = f"{processor!r} on a strided view of {logits.dtype} logits"
    try:
        out = processor(view, make_ctx())
    except RuntimeError as error:
        raise AssertionError(f"{what}: raised {error!r}") from None
    assert torch.equal(wide[..., 0], logits) and not bool(wide[..., 1].any()), (
        f"{what}: wrote into its input; allowed: {NEW_TENSOR}"
    )
    assert_same_logits(out, processor(logits.clone(), make_ctx()), f"{what} vs its copy", rtol=0.0, atol=0.0)


def check_candidates(processor: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory) -> None:
    """`to_candidates` and `on_candidates`, where defined, agree with the dense call.

    `to_candidates` may mark a row NaN (its result does not fit the set: the chain redoes it
    densely), but not on continuous float32 or float64 logits, and the other rows must agree.
    """
    rtol, atol = tolerance(logits.dtype)
    B, V = logits.shape
    tied = has_ties(logits)
    to_candidates = getattr(processor, "to_candidates", None)
    if to_candidates is not None:
        what = f"{processor!r}.to_candidates on {'tied ' if tied else ''}{logits.dtype} logits"
        ctx = history.context(factory)
        kept = history_kept(ctx)
        c = to_candidates(logits.clone(), ctx)
        kept(what)
        if c is not None:
            assert_candidates_valid(c, B, V, logits.dtype, what)
            held = ~torch.isnan(c.values).any(-1)
            dense = processor(logits.clone(), history.context(factory))
            assert_same_logits(densify(c, V)[held], dense[held], f"{what} vs the dense call", rtol=rtol, atol=atol)
            if logits.dtype in (torch.float32, torch.float64) and not tied:
                assert bool(held.all()), f"{what}: marked rows {first_rows(~held[:, None])} NaN on continuous logits"
    on_candidates = getattr(processor, "on_candidates", None)
    if on_candidates is not None:
        what = f"{processor!r}.on_candidates on {'tied ' if tied else ''}{logits.dtype} candidates"
        values, indices = candidates_from(logits, max(2, V // 4))
        values[0, values.shape[1] // 2 :] = NEG  # input candidates may end in -inf
        given, ctx = Candidates(values.clone(), indices.clone()), history.context(factory)
        kept = history_kept(ctx)
        c = on_candidates(given, ctx)
        kept(what)
        unchanged = torch.equal(given.values, values) and torch.equal(given.indices, indices)
        assert unchanged, f"{what}: modified the input candidates in place; allowed: {NEW_TENSOR}"
        assert_candidates_valid(c, B, V, logits.dtype, what)
        dense = processor(densify(Candidates(values, indices), V), history.context(factory))
        assert_same_logits(densify(c, V), dense, f"{what} vs the dense call", rtol=rtol, atol=atol)


def check_processor_reads_nothing(
    processor: Any, logits: Tensor, history: TokenHistory, factory: ContextFactory
) -> None:
    """What a chain's step calls reads nothing back from the device: `to_candidates` (and the dense call
    where it gives None, or where there is none) on logits, `on_candidates` on candidates. Raises
    `host_reads.UncheckedError` when the processor cannot run on fake tensors for another reason."""
    on = f" on {logits.dtype} logits"
    to_candidates = getattr(processor, "to_candidates", None)
    if to_candidates is not None:
        assert_reads_nothing(processor, f".to_candidates{on}", to_candidates, logits, history.context(factory))
    if to_candidates is None or to_candidates(logits.clone(), history.context(factory)) is None:
        assert_reads_nothing(processor, on, processor, logits, history.context(factory))
    on_candidates = getattr(processor, "on_candidates", None)
    if on_candidates is not None:
        c = candidates_from(logits, max(2, logits.shape[1] // 4))
        assert_reads_nothing(processor, f".on_candidates{on}", on_candidates, c, history.context(factory))


def check_processor(processor: Any, *, reads_back: str = "", **options: Unpack[KitOptions]) -> None:
    """Every processor check, for each dtype, on a plain and on a ragged left-padded history (step > 0).

    options: the fields of `KitSettings`, `vocab_size=64`, `batch_size=4`, `dtypes` (every float
    dtype), `seed=0` and `ctx_factory` (None: `DecodeContext`). reads_back: why the processor must read
    a value back in its step (the suites' `reads_back`); the host-read check is then left out.
    """
    settings = KitSettings(**options)
    factory = settings.factory
    check_spec_round_trip(processor)
    for ragged in (False, True):
        for logits, history in settings.cases(ragged):
            out = check_processor_contract(processor, logits, partial(history.context, factory))
            check_rows_independent(processor, logits, out, history, factory)
            check_view_input(processor, logits, partial(history.context, factory))
            check_candidates(processor, logits, history, factory)
    if not reads_back:
        warn_unchecked(lambda: each_fake_case(settings, partial(check_processor_reads_nothing, processor)))


class ProcessorConformance(Conformance):
    """Subclass and define `make()`; every processor check runs as a pytest test."""

    def _each(self, ragged: bool, check: Callable[[Any, Tensor, TokenHistory], None]) -> None:
        processor = self.make()
        for logits, history in self.settings.cases(ragged):
            check(processor, logits, history)

    def _contract_and_rows(self, processor: Any, logits: Tensor, history: TokenHistory) -> None:
        out = check_processor_contract(processor, logits, partial(history.context, self.make_context))
        check_rows_independent(processor, logits, out, history, self.make_context)

    def test_contract_and_rows_independent(self) -> None:
        self._each(False, self._contract_and_rows)

    def test_ragged_history(self) -> None:
        self._each(True, self._contract_and_rows)

    def test_view_input(self) -> None:
        self._each(True, lambda p, x, h: check_view_input(p, x, partial(h.context, self.make_context)))

    def test_candidates_agree_with_dense(self) -> None:
        processor = self.make()
        if not any(hasattr(processor, hook) for hook in ("to_candidates", "on_candidates")):
            import pytest

            pytest.skip("the processor has no candidate methods")
        for ragged in (False, True):
            self._each(ragged, lambda p, x, h: check_candidates(p, x, h, self.make_context))

    def test_reads_nothing_back(self) -> None:
        processor = self.make()
        self._unless_reads_back(
            lambda: each_fake_case(self.settings, partial(check_processor_reads_nothing, processor))
        )

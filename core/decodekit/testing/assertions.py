"""Comparisons the sampler checks make, with messages naming the rows and tokens involved."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decodekit.context import DecodeContext
from decodekit.stage import Candidates

__all__ = ["NEW_TENSOR", "ROW_DRAWS", "assert_candidates_valid", "assert_same_logits", "first_rows", "history_kept"]

NEW_TENSOR = "a new tensor (out-of-place ops: masked_fill, not masked_fill_; never x[...] = ...)"  # what to return
ROW_DRAWS = "draws from the rows' generators, ctx.generators[b] or ctx.uniform(), never torch's global one"


def history_kept(ctx: DecodeContext) -> Callable[[str], None]:
    """A check that `ctx`'s token history and prompt lengths are still what they are now: a stage reads them,
    and the chain's later stages and the decode loop read them after it."""
    saved = {name: t.clone() for name in ("tokens", "prompt_lengths") if (t := getattr(ctx, name)) is not None}

    def check(what: str) -> None:
        for name, before in saved.items():
            assert torch.equal(getattr(ctx, name), before), (
                f"{what}: modified ctx.{name} in place; allowed: reading it (the chain's later stages and the "
                "decode loop read it after this stage)"
            )

    return check


def first_rows(mask: Tensor) -> str:
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
            f"{what}: the removed (-inf) tokens differ in rows {first_rows(diff)}; row {row}: "
            f"removed only in the result: {only_a}, only in the reference: {only_e}"
        )
    a_nan, e_nan = torch.isnan(actual), torch.isnan(expected)
    assert torch.equal(a_nan, e_nan), f"{what}: NaN at different tokens in rows {first_rows(a_nan != e_nan)}"
    kept = ~(e_removed | e_nan)
    a, e = actual[kept].float(), expected[kept].float()
    if not torch.allclose(a, e, rtol=rtol, atol=atol):
        worst = int((a - e).abs().argmax())
        raise AssertionError(
            f"{what}: kept logits differ: {a[worst].item()!r} vs {e[worst].item()!r} "
            f"(max abs difference {(a - e).abs().max().item():.3g}, rtol={rtol}, atol={atol})"
        )


def assert_candidates_valid(c: object, batch_size: int, vocab_size: int, dtype: torch.dtype, what: str) -> None:
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
    assert not bool(repeated.any()), f"{what}: a token id occurs twice in rows {first_rows(repeated[:, None])}"
    unsorted = (v[:, 1:] > v[:, :-1]).any(-1)
    assert not bool(unsorted.any()), f"{what}: values not sorted descending in rows {first_rows(unsorted[:, None])}"


# -- processors ------------------------------------------------------------------------

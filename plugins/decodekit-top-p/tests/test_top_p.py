"""top_p: the notes' A/B/C example and other hand-worked cases, ties, the partial-sort paths, HF parity, the kit."""

from __future__ import annotations

import math

import pytest
import torch
from decodekit_top_p.params import TopPParams
from decodekit_top_p.top_p import ROOM, TopP

import decodekit as dk
from decodekit.stage import Candidates, densify
from decodekit.testing import NEG, ProcessorConformance, check_processor, ctx_for


def log_probs(*probs: float) -> torch.Tensor:
    return torch.tensor([[math.log(q) for q in probs]])


def kept(x: torch.Tensor, p: float, min_keep: int = 1) -> list[int]:
    """The tokens row 0 keeps, by the dense call, checked against the candidate path (which sums
    unnormalised mass against p times its total instead of a softmax) on every token as a candidate."""
    stage = TopP(p=p, min_keep=min_keep)
    out = stage(x, ctx_for(x.shape[0]))
    values, ids = x.sort(-1, descending=True)
    fast = densify(stage.on_candidates(Candidates(values, ids), ctx_for(x.shape[0])), x.shape[1])
    dense = torch.isfinite(out[0]).nonzero().flatten().tolist()
    assert torch.isfinite(fast[0]).nonzero().flatten().tolist() == dense, (x, p, min_keep)
    return dense


def reference(x: torch.Tensor, p: float, min_keep: int = 1) -> torch.Tensor:
    """Token i stays iff the mass of the tokens strictly more probable than it is < p (or it is among
    the min_keep most probable, ties included); in float64, without any shortcut."""
    probs = x.double().softmax(-1)
    asc = x.sort(-1).values
    greater = x.shape[1] - torch.searchsorted(asc, x, right=True)  # [B, V] tokens strictly above each one
    desc_probs = probs.sort(-1, descending=True).values
    before = torch.cat([torch.zeros(x.shape[0], 1, dtype=torch.float64), desc_probs.cumsum(-1)], 1)
    mass_above = before.gather(1, greater)
    keep = (mass_above < p) | (greater < min_keep)
    return x.masked_fill(~keep, NEG)


def test_the_notes_example() -> None:
    # A = 0.6, B = 0.25, C = 0.1, the rest 0.05: p = 0.8 keeps {A, B}
    x = log_probs(0.6, 0.25, 0.1, 0.05)
    assert kept(x, 0.8) == [0, 1]
    # the rest spread over five tokens changes nothing
    assert kept(log_probs(0.6, 0.25, 0.1, 0.01, 0.01, 0.01, 0.01, 0.01), 0.8) == [0, 1]
    # the same distribution shuffled: the rule is about probability, not position
    assert kept(log_probs(0.1, 0.05, 0.25, 0.6), 0.8) == [2, 3]


def test_the_token_that_crosses_p_is_kept() -> None:
    x = log_probs(0.6, 0.25, 0.1, 0.05)
    assert kept(x, 0.59) == [0]  # A alone reaches 0.59
    assert kept(x, 0.61) == [0, 1]  # A falls short of 0.61; B crosses it and stays
    assert kept(x, 0.86) == [0, 1, 2]  # A + B = 0.85 < 0.86; C crosses
    assert kept(x, 0.96) == [0, 1, 2, 3]


def test_the_token_that_brings_the_mass_exactly_to_p_is_the_last_kept() -> None:
    # p = [0.5, 0.25, 0.125, 0.0625, 0.0625]: each exp(x - max) is a power of two, exact in float32, so the
    # prefix sums are too: A + B = 0.75 exactly. At p = 0.75 the mass before C already reaches p: C goes.
    # transformers' TopPLogitsWarper removes the tokens whose ascending cumulative mass is <= 1 - p = 0.25:
    # the two 0.0625s and C, the same two kept.
    x = log_probs(0.5, 0.25, 0.125, 0.0625, 0.0625)
    assert (x - x.max()).exp().tolist() == [[1.0, 0.5, 0.25, 0.125, 0.125]]  # the exactness the case needs
    assert kept(x, 0.75) == [0, 1]
    assert torch.isfinite(reference(x, 0.75)[0]).nonzero().flatten().tolist() == [0, 1]
    assert kept(x, 0.875) == [0, 1, 2]  # A + B + C = 0.875: the 0.0625s go


def test_the_most_probable_token_is_never_removed() -> None:
    x = log_probs(0.6, 0.25, 0.1, 0.05)
    assert kept(x, 1e-6) == [0]
    assert kept(log_probs(0.3, 0.7), 0.01) == [1]


def test_min_keep() -> None:
    x = log_probs(0.6, 0.25, 0.1, 0.05)
    assert kept(x, 0.5, min_keep=3) == [0, 1, 2]
    assert kept(x, 0.8, min_keep=1) == [0, 1]
    assert kept(x, 0.5, min_keep=10) == [0, 1, 2, 3]


def test_ties_with_the_last_kept_token_are_kept() -> None:
    # A = 0.4, then three tokens of 0.2: the mass above each 0.2 token is 0.4 < 0.5
    assert kept(log_probs(0.4, 0.2, 0.2, 0.2), 0.5) == [0, 1, 2, 3]
    assert kept(log_probs(0.4, 0.2, 0.2, 0.2), 0.39) == [0]


def test_p_one_is_a_no_op() -> None:
    x = torch.tensor([[0.0, -30.0, NEG, -100.0]])
    assert TopP(p=1.0)(x, ctx_for()) is x
    assert TopP(p=1.0).to_candidates(x, ctx_for()) is None


def test_removed_tokens_stay_removed_and_values_are_unchanged() -> None:
    x = torch.tensor([[1.0, NEG, 0.5, 3.0, NEG]])
    out = TopP(p=0.9)(x, ctx_for())
    assert torch.isneginf(out[0, [1, 4]]).all()
    finite = torch.isfinite(out)
    assert torch.equal(out[finite], x[finite])


def peaked(vocab: int, exponent: float, seed: int) -> torch.Tensor:
    """Zipf-like logits `-exponent · log(rank)`, shuffled, with a little noise."""
    g = torch.Generator().manual_seed(seed)
    base = -exponent * torch.log(torch.arange(1, vocab + 1, dtype=torch.float32))
    return torch.stack([base[torch.randperm(vocab, generator=g)] + 0.01 * torch.randn(vocab, generator=g)])


@pytest.mark.parametrize("exponent", [1.5, 1.3, 1.2, 1.05, 0.3])  # nucleus ~50, ~400, ~1,400, ~5,300, ~17,000
def test_the_dense_call_and_the_candidates_equal_the_reference(exponent: float) -> None:
    x = peaked(20_000, exponent, seed=3)
    p = 0.9
    expected = reference(x, p)
    assert torch.equal(TopP(p=p)(x, ctx_for()), expected)
    c = TopP(p=p).to_candidates(x, ctx_for())
    assert c is not None and c.values.shape[1] == ROOM  # a static size
    if int(torch.isfinite(expected).sum()) <= ROOM:
        assert torch.equal(densify(c, 20_000), expected)
    else:  # the nucleus does not fit: the row is the chain's to redo densely
        assert bool(c.values.isnan().all())


def test_a_vocabulary_within_room_lists_the_whole_row_and_keeps_nan_visible() -> None:
    """V <= ROOM: every token is a candidate (no bound to test against), each finite row's nucleus is
    the reference's, and a row's NaN stays visible (the sampler marks the row)."""
    x = torch.randn(3, 84, generator=torch.Generator().manual_seed(5)) * 3
    x[1, 7] = float("nan")
    x[2, 20:] = NEG  # fewer finite tokens than the nucleus would take
    c = TopP(p=0.9).to_candidates(x, ctx_for(3))
    assert c is not None and c.values.shape == (3, 84)
    dense = densify(c, 84)
    assert bool(dense[1, 7].isnan()) and not bool(dense[[0, 2]].isnan().any())
    for r in (0, 2):
        assert torch.equal(dense[r : r + 1], reference(x[r : r + 1], 0.9))


def test_does_not_sort_the_vocabulary_when_a_partial_topk_suffices(monkeypatch: pytest.MonkeyPatch) -> None:
    x = peaked(50_257, 1.5, seed=0)
    expected = reference(x, 0.9)

    def no_sort(*args: object, **kwargs: object) -> None:
        raise AssertionError("sorted the whole vocabulary")

    monkeypatch.setattr(torch.Tensor, "sort", no_sort)
    assert torch.equal(TopP(p=0.9)(x, ctx_for()), expected)


def test_on_candidates_renormalises_over_the_candidates() -> None:
    # after a truncation to {0.6, 0.25, 0.1} (renormalised: 0.632, 0.263, 0.105), p = 0.8 keeps 2, p = 0.9 all 3
    c = Candidates(torch.log(torch.tensor([[0.6, 0.25, 0.1]])), torch.tensor([[7, 2, 5]]))
    assert torch.isfinite(TopP(p=0.8).on_candidates(c, ctx_for()).values).tolist() == [[True, True, False]]
    assert torch.isfinite(TopP(p=0.9).on_candidates(c, ctx_for()).values).tolist() == [[True, True, True]]


@pytest.mark.parametrize("min_keep", [1, 3])
def test_on_candidates_a_row_keeps_the_same_alone_and_in_a_batch(min_keep: int) -> None:
    # `last_kept` searches one row's cumulative mass without a clamp (a contiguous slice), several
    # rows (or min_keep > 1) with one: every row keeps the same tokens either way, and the same as
    # the dense call.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 40, generator=g) * torch.tensor([[0.5], [1.0], [2.0], [4.0], [8.0], [0.1]])
    values, ids = x.sort(-1, descending=True)
    stage = TopP(p=0.7, min_keep=min_keep)
    batch = stage.on_candidates(Candidates(values, ids), ctx_for(6)).values
    for b in range(6):
        alone = stage.on_candidates(Candidates(values[b : b + 1], ids[b : b + 1]), ctx_for()).values
        assert torch.equal(alone[0], batch[b]), b
    dense = stage(x, ctx_for(6))
    assert torch.equal(densify(Candidates(batch, ids), 40), dense)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_input(dtype: torch.dtype) -> None:
    x = peaked(5000, 1.2, seed=1).to(dtype)
    out = TopP(p=0.9)(x, ctx_for())
    assert out.dtype == dtype
    assert torch.equal(torch.isfinite(out), torch.isfinite(reference(x.float(), 0.9)))


@pytest.mark.parametrize("min_keep", [1, 5])
@pytest.mark.parametrize("p", [0.3, 0.7, 0.9, 0.95])
def test_matches_transformers(p: float, min_keep: int) -> None:
    from transformers import TopPLogitsWarper

    x = torch.randn(6, 400, generator=torch.Generator().manual_seed(int(p * 100) + min_keep)) * 2  # no ties
    ours = TopP(p=p, min_keep=min_keep)(x, ctx_for(6))
    theirs = TopPLogitsWarper(top_p=p, min_tokens_to_keep=min_keep)(torch.zeros(6, 1, dtype=torch.long), x.clone())
    assert torch.equal(torch.isneginf(ours), torch.isneginf(theirs))
    assert torch.equal(ours, theirs)


def test_created_by_name_with_defaults() -> None:
    p = dk.create("top_p", p=0.9)
    assert isinstance(p, TopP) and p.params == TopPParams(p=0.9, min_keep=1)
    assert dk.create("top_p", 0.9, 2).params.min_keep == 2


@pytest.mark.parametrize(
    ("bad", "allowed"),
    [({"p": 1.5}, "0 < p <= 1"), ({"p": 0}, "0 < p <= 1"), ({"p": 0.9, "min_keep": 0}, "1 <= min_keep")],
)
def test_bad_parameters_name_parameter_value_and_range(bad: dict[str, object], allowed: str) -> None:
    name, value = list(bad.items())[-1]
    with pytest.raises(dk.ParameterError) as e:
        dk.create("top_p", **bad)
    assert f"{name}={value!r}" in str(e.value) and allowed in str(e.value)
    with pytest.raises(dk.ParameterError):
        TopP(**bad)


def test_unknown_parameter() -> None:
    with pytest.raises(dk.ParameterError, match=r"unknown parameter top_p=0\.9; allowed parameters: p, min_keep"):
        dk.create("top_p", top_p=0.9)


class TestTopPConformance(ProcessorConformance):
    def make(self) -> TopP:
        return TopP(p=0.8)


class TestTopPMinKeepConformance(ProcessorConformance):
    vocab_size = 600  # large enough for the partial-topk search

    def make(self) -> TopP:
        return TopP(p=0.5, min_keep=3)


class RevivesRemoved(TopP):
    """A broken top-p: renormalises removed tokens back to a finite floor."""

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return super().__call__(logits, ctx).clamp(min=-1e4)


def test_the_kit_catches_a_processor_that_revives_removed_tokens() -> None:
    with pytest.raises(AssertionError, match="revived removed"):
        check_processor(RevivesRemoved(p=0.9))

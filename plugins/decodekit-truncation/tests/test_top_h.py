"""top_h against transformers 5's `TopHLogitsWarper`, by hand, and row by row.

Exact on continuous logits (the same arithmetic on the float32 copy). Chosen and pinned here: every token
tied with the last one kept stays, where transformers keeps those its `torch.topk` lists first (its choice
depends on the sort, and the device); half-precision logits are judged in float32.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from decodekit_truncation._keep import remove_below
from torch import Tensor

import decodekit as dk
from decodekit.testing.inputs import edge_logits, random_logits

logits_process = pytest.importorskip("transformers.generation.logits_process")

H = (0.05, 0.4, 0.9, 1.0)


def ours(x: Tensor, h: float, **params: object) -> Tensor:
    out: Tensor = dk.create("top_h", h=h, **params)(x.clone(), dk.DecodeContext(tokens=torch.zeros(len(x), 1).long()))
    return out


def theirs(x: Tensor, h: float) -> Tensor:
    """transformers' result on the float32 copy of `x`."""
    out: Tensor = logits_process.TopHLogitsWarper(top_h=h)(torch.zeros(len(x), 1).long(), x.float())
    return out


def kept(probs: list[float], h: float, **params: object) -> list[int]:
    return torch.isfinite(ours(torch.tensor([probs]).log(), h, **params)[0]).nonzero().flatten().tolist()


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("h", H)
def test_many_continuous_rows_match_transformers(seed: int, h: float) -> None:
    """512 rows from flat to peaked, a vocabulary of 4,000: the same kept set, token for token."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 4000, generator=g) * torch.linspace(0.3, 8.0, 512)[:, None]
    out = ours(x, h)
    assert torch.equal(torch.isneginf(out), torch.isneginf(theirs(x, h)))
    assert torch.equal(out[torch.isfinite(out)], x[torch.isfinite(out)])
    assert 1 < int(torch.isfinite(out).sum(-1).max()) <= 100


@pytest.mark.parametrize("h", H)
def test_rows_an_earlier_stage_cut_match_transformers(h: float) -> None:
    """A quarter of each row removed, and rows with fewer finite tokens than the 100 candidates."""
    x = random_logits(64, 500, seed=3)
    x[32:] = torch.where(torch.rand(32, 500, generator=torch.Generator().manual_seed(4)) < 0.9, -math.inf, x[32:])
    assert int(torch.isfinite(x[32:]).sum(-1).min()) < 100
    assert torch.equal(torch.isneginf(ours(x, h)), torch.isneginf(theirs(x, h)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("h", H)
@pytest.mark.parametrize("seed", range(6))
def test_edge_rows_keep_transformers_set_and_its_last_tokens_ties(seed: int, h: float, dtype: torch.dtype) -> None:
    """Ties, all-equal and one-hot rows, one finite token, half-removed rows: ours is transformers' kept set
    plus exactly the tokens tied with its least probable kept one (which `topk` lists in any order)."""
    x = edge_logits(300, seed=seed, dtype=dtype)
    out, reference = ours(x, h), theirs(x, h)
    assert out.dtype == dtype
    last = x.float().masked_fill(torch.isneginf(reference), math.inf).amin(-1, keepdim=True)  # its last kept
    assert torch.equal(torch.isfinite(out), torch.isfinite(x) & (x.float() >= last))
    assert torch.equal(out[torch.isfinite(out)], x[torch.isfinite(out)])  # values untouched, nothing revived
    assert bool(torch.isfinite(out).any(-1).all())


def test_edge_rows_do_reach_the_tie_difference() -> None:
    """Row 6 is all-equal: transformers keeps 30 of its 300 tied tokens at h = 0.3 (by topk's order), ours all."""
    x = edge_logits(300, seed=0)
    assert int(torch.isfinite(theirs(x, 0.3)[6]).sum()) == 30
    assert int(torch.isfinite(ours(x, 0.3)[6]).sum()) == 300


def test_half_precision_transformers_in_its_dtype_differs() -> None:
    """Why the half-precision reference is the float32 copy: transformers' own cut moves with the dtype."""
    moved = 0
    for seed in range(6):
        x = random_logits(64, 300, seed=seed, dtype=torch.bfloat16)
        for h in H:
            in_dtype = logits_process.TopHLogitsWarper(top_h=h)(torch.zeros(64, 1).long(), x.clone())
            moved += int((torch.isneginf(in_dtype) != torch.isneginf(theirs(x, h))).sum())
    assert moved > 0


P4 = [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize(
    ("h", "expected"),
    [
        # q = p (4 tokens < 100); terms -q ln q in order 0.4, 0.3, 0.2, 0.1: 0.3665, 0.3612, 0.3219, 0.2303;
        # summed 0.3665, 0.7277, 1.0496, 1.2799 = H.
        (0.2, [3]),  # tau 0.2560: not even the first term fits; the most probable stays
        (0.6, [2, 3]),  # tau 0.7679
        (0.85, [1, 2, 3]),  # tau 1.0879
        (0.99, [1, 2, 3]),  # tau 1.2671 < 1.2799
    ],
)
def test_hand_worked(h: float, expected: list[int]) -> None:
    assert kept(P4, h) == expected


def test_top_n_renormalises_over_the_candidates() -> None:
    # top_n = 3: q = (0.4, 0.3, 0.2) / 0.9, terms 0.3604, 0.3662, 0.3342, H = 1.0609; tau at h = 0.6 is 0.6365:
    # only the first fits (top_n = 100 keeps two: tau 0.7679 >= 0.7277). The token outside the three goes.
    assert kept(P4, 0.6, top_n=3) == [3]
    assert kept(P4, 0.7, top_n=3) == [2, 3]  # tau 0.7426 >= 0.3604 + 0.3662 = 0.7266
    assert kept(P4, 1.0, top_n=1) == [3]


def test_ties_with_the_last_kept_token_all_stay() -> None:
    # p = (0.3, 0.3, 0.2, 0.2): terms 0.3612 each for the 0.3s; h = 0.3 gives tau 0.4098: one 0.3 fits,
    # and its tie stays (transformers keeps the one its topk lists first).
    assert kept([0.3, 0.3, 0.2, 0.2], 0.3) == [0, 1]
    assert int(torch.isfinite(theirs(torch.tensor([[0.3, 0.3, 0.2, 0.2]]).log(), 0.3)).sum()) == 1


def test_a_row_does_not_depend_on_its_batch() -> None:
    x = random_logits(8, 3000, seed=5)
    together = ours(x, 0.5)
    assert torch.equal(together, torch.cat([ours(x[b : b + 1], 0.5) for b in range(8)]))
    assert torch.equal(together[2:5], ours(x[2:5], 0.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("text", ["top_h(0.4)", "top_k(60) | top_h(0.9)", "top_h(1.0, 30) | top_p(0.9)"])
def test_the_candidate_fast_path_is_the_dense_result(text: str, dtype: torch.dtype) -> None:
    """Continuous and tied rows: the chain's candidates (rows that do not fit them are NaN, redone densely)
    are what `process` gives densely, and the fast path keeps at most 2 * top_n tokens."""
    from decodekit.stage import Candidates, densify

    chain = dk.Chain.parse(text)
    for ties in (False, True):
        x = random_logits(16, 4000, seed=9, ties=ties, dtype=dtype)
        ctx = dk.DecodeContext(tokens=torch.zeros(16, 1).long())
        fast = chain._process_fast(x.clone(), ctx)
        assert isinstance(fast, Candidates) and fast.values.shape[1] <= 200
        held = ~torch.isnan(fast.values).any(-1)
        assert int(held.sum()) >= (16 if not ties else 1)
        assert torch.equal(densify(fast, 4000)[held], chain.process(x, ctx)[held].to(dtype))


def test_the_candidate_fast_path_keeps_float64_rows_dense_keeps() -> None:
    """Found by the fuzzer: the candidates compared their float64 values with the float32 cut, which rounds the
    last kept logit up about half the time, and so dropped that token; the dense row compares in float32."""
    from decodekit.stage import Candidates, densify

    chain = dk.Chain.parse("top_h(0.32, top_n=32)")
    x = torch.randn(64, 130, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ctx = dk.DecodeContext(tokens=torch.zeros(64, 1).long())
    fast = chain._process_fast(x.clone(), ctx)
    assert isinstance(fast, Candidates)
    held = ~torch.isnan(fast.values).any(-1)
    assert int(held.sum()) == 64
    assert torch.equal(densify(fast, 130), chain.process(x, ctx))


@pytest.mark.parametrize(("scale", "shift"), [(1.0, 3e38), (3e38, 0.0)])
def test_float64_rows_past_float32s_range_are_cut_in_float64(scale: float, shift: float) -> None:
    """Found by the fuzzer (seed 4242): in float32 these rows round into ties (3e38 + N(0, 1)) or overflow to inf
    (3e38 * N(0, 1)), so the dense row lost its cut (NaN: unsampleable) or kept other ties than the candidates."""
    from decodekit.stage import Candidates, densify

    x = torch.randn(16, 600, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * scale + shift
    ctx = dk.DecodeContext(tokens=torch.zeros(16, 1).long())
    for chain in (dk.Chain.parse("top_h(0.96)"), dk.Chain.parse("top_h(1e-38, top_n=3)")):
        dense = chain.process(x, ctx)
        assert not dense.isnan().any() and (dense > float("-inf")).any(-1).all()
        fast = chain._process_fast(x.clone(), ctx)
        assert isinstance(fast, Candidates)
        held = ~torch.isnan(fast.values).any(-1)
        assert torch.equal(densify(fast, 600)[held], dense[held])


@pytest.mark.parametrize("text", ["top_h(5e-324, top_n=1) | temperature(0.5)", "top_k(60) | top_h(1.0, top_n=3)"])
def test_a_row_holding_inf_is_unsampleable_on_the_fast_path_too(text: str) -> None:
    """Found by the fuzzer (seed 9001): densely the cut of +inf removes every token (inf - inf is NaN), so the row
    cannot be sampled; the candidates kept the +inf one (inf >= inf), `temperature` made it finite, and the chain
    sampled a row `chain.process` leaves empty."""
    x = torch.full((1, 64), float("-inf"))
    x[0, [3, 9, 20]] = torch.tensor([6e-8, float("inf"), 65504.0])
    ctx = dk.DecodeContext(tokens=torch.zeros(1, 1).long())
    chain = dk.Chain.parse(text)
    assert not (chain.process(x, ctx) > float("-inf")).any()
    with pytest.raises(dk.NumericsError):
        chain(x, ctx)


def test_a_float64_chain_picks_only_what_process_keeps() -> None:
    """The fuzzer's case (seed 777) of the bug above, through the chain's call: the fast path had lost top_h's last
    kept token, and `temperature(0)` then picked a token `chain.process` removed."""
    from decodekit.testing.fuzz.inputs import History, Logits, Row

    x = Logits(rows=(Row(scale=1.0),), vocab_size=4096, dtype="float64", seed=9).tensor()
    ctx = History(batch_size=1, length=8, id_limit=4096, seed=15).context()
    chain = dk.Chain.parse("top_h(1.0) | typical(1e-45) | bad_words([[0, 1]]) | temperature(0) | sample")
    token = int(chain(x, ctx)[0])
    assert chain.process(x, ctx)[0, token] > float("-inf")


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # as tests/test_step_sync_free.py: inductor once per worker
def test_compiles_as_one_graph_dense_and_on_candidates() -> None:
    """fullgraph=True fails on any graph break, a host read included."""
    x = random_logits(2, 5000, seed=1)
    torch._dynamo.mark_static(x, 1)  # as `Chain.compiled` does: another test's vocabulary made it a symbol
    ctx = dk.DecodeContext(tokens=torch.zeros(2, 1).long())
    top_h = dk.create("top_h", h=0.6)
    compiled: Any = torch.compile(top_h, fullgraph=True)  # torch.compile's result is untyped
    assert torch.equal(compiled(x, ctx), top_h(x, ctx))
    chain = dk.Chain.parse("temperature(0.8) | top_h(0.6) | top_p(0.95)")
    got, expected = torch.compile(chain._process_fast, fullgraph=True)(x, ctx), chain._process_fast(x, ctx)
    assert isinstance(got, dk.Candidates) and isinstance(expected, dk.Candidates)
    assert torch.equal(got.indices[torch.isfinite(got.values)], expected.indices[torch.isfinite(expected.values)])


def test_a_negative_zero_logit_tied_with_a_positive_zero_cut_stays() -> None:
    """-0.0 - 0.0 is -0.0: a sign test on the margin removed the tie, so the dense row kept fewer tokens than
    the candidate path (found with a batch whose cut was +0.0 and a tied logit -0.0)."""
    x = torch.tensor([[1.0, 0.0, -0.0, -1.0]])
    assert (
        torch.isfinite(dk.create("min_p", p=math.exp(-1.0))(x.clone(), dk.DecodeContext(tokens=x[:, :1].long()))).sum()
        == 3
    )
    ties = torch.tensor([[2.0, 0.0, -0.0, 0.0]])
    assert torch.isfinite(remove_below(ties, ties, torch.zeros(1, 1))).sum() == 4


@pytest.mark.parametrize("top_n", [2**20 + 1, 2**53 + 1, 2**64])
def test_a_top_n_past_any_vocabulary_is_refused(top_n: int) -> None:
    """Found by the fuzzer: the cut pads the top logits to top_n, so 2**53 + 1 tried to allocate that many floats
    (RuntimeError) and 2**64 overflowed `pad` (TypeError)."""
    with pytest.raises(
        dk.ParameterError, match=rf"^top_h: top_n={top_n} is invalid: .*allowed: an integer 1 <= top_n <= "
    ):
        dk.Chain.parse(f"top_h(0.5, top_n={top_n})")

"""top_k: hand-worked cases, ties, the candidate search against torch.topk, HF parity, the kit."""

from __future__ import annotations

import pytest
import torch
from decodekit_top_k.params import TopKParams
from decodekit_top_k.top_k import TopK

import decodekit as dk
from decodekit.stage import Candidates, densify
from decodekit.testing import NEG, ProcessorConformance, check_processor, ctx_for


def test_keeps_the_k_largest() -> None:
    x = torch.tensor([[1.0, 4.0, 2.0, 3.0, 0.5]])
    assert torch.equal(TopK(k=2)(x, ctx_for()), torch.tensor([[NEG, 4.0, NEG, 3.0, NEG]]))
    assert torch.equal(TopK(k=1)(x, ctx_for()), torch.tensor([[NEG, 4.0, NEG, NEG, NEG]]))


def test_keeps_every_tie_at_the_kth_value() -> None:
    x = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0, 2.0]])
    # the 2nd largest is 2.0, shared by tokens 2, 3 and 5: all are kept, 4 tokens in all
    assert torch.equal(TopK(k=2)(x, ctx_for()), torch.tensor([[3.0, NEG, 2.0, 2.0, NEG, 2.0]]))
    c = TopK(k=2).to_candidates(x, ctx_for())
    assert c is not None  # the whole row fits the room (k + TIE_ROOM): sorted, the rest -inf
    assert c.values.tolist() == [[3.0, 2.0, 2.0, 2.0, NEG, NEG]]
    assert sorted(c.indices[0, 1:4].tolist()) == [2, 3, 5]


def test_ties_past_the_room_mark_the_row_for_the_dense_path() -> None:
    from decodekit_top_k.top_k import TIE_ROOM

    x = torch.zeros(2, 100)
    x[0, :3] = torch.tensor([3.0, 2.0, 1.0])  # no tie at the 2nd value: held
    x[1, 0] = 3.0  # 99 tokens tied at the 2nd value: more than TIE_ROOM
    c = TopK(k=2).to_candidates(x, ctx_for(2))
    assert c is not None and c.values.shape == (2, 2 + TIE_ROOM)
    assert c.values[0, :2].tolist() == [3.0, 2.0] and bool(torch.isneginf(c.values[0, 2:]).all())
    assert bool(c.values[1].isnan().all())


def test_k_at_least_vocab_is_a_no_op() -> None:
    x = torch.tensor([[1.0, NEG, 2.0]])
    assert TopK(k=3)(x, ctx_for()) is x
    assert TopK(k=10)(x, ctx_for()) is x
    assert TopK(k=3).to_candidates(x, ctx_for()) is None


def test_rows_with_fewer_than_k_finite_tokens_keep_them() -> None:
    x = torch.tensor([[1.0, NEG, 2.0, NEG], [0.0, 1.0, 2.0, 3.0]])
    out = TopK(k=3)(x, ctx_for(2))
    assert torch.equal(out, torch.tensor([[1.0, NEG, 2.0, NEG], [NEG, 1.0, 2.0, 3.0]]))
    on = TopK(k=3).on_candidates(Candidates(*x.topk(4)), ctx_for(2))
    assert torch.equal(densify(on, 4), out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_row_of_infinities_extremes_and_nan_is_the_definition(dtype: torch.dtype) -> None:
    """`x_i` if not `x_i < x_(k)` else -inf, x_(k) the k-th largest with NaN above all (torch.topk's order), on every
    row of 4 values from -inf, the dtype's lowest, -1, 0, +inf and NaN: rows of fewer than k finite logits (x_(k) is
    -inf), of ties at the lowest, of NaN. A clamp of x_(k) to the dtype's lowest, once here, changed none of them."""
    import itertools
    import math

    lowest = torch.finfo(dtype).min
    values = [-math.inf, lowest, -1.0, 0.0, math.inf, math.nan]
    rows = list(itertools.product(values, repeat=4))
    x = torch.tensor(rows, dtype=dtype)
    for k in (1, 2, 3):
        want = []
        for row in rows:
            kth = sorted(row, key=lambda v: (not math.isnan(v), -v if not math.isnan(v) else 0.0))[k - 1]
            want.append([v if math.isnan(v) or not v < kth else -math.inf for v in row])
        got, expected = TopK(k=k)(x, ctx_for(len(rows))), torch.tensor(want, dtype=dtype)
        assert torch.equal(got.isnan(), expected.isnan())
        assert torch.equal(got.masked_fill(got.isnan(), 0.0), expected.masked_fill(expected.isnan(), 0.0))


def test_nan_stays_visible() -> None:
    x = torch.tensor([[float("nan"), 1.0, 2.0, 0.0]])
    assert torch.isnan(TopK(k=2)(x, ctx_for())).any()


def test_matches_transformers() -> None:
    from transformers import TopKLogitsWarper

    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(0)) * 2
    ids = torch.zeros(5, 1, dtype=torch.long)
    for k in (1, 7, 40):
        assert torch.equal(TopK(k=k)(x, ctx_for(5)), TopKLogitsWarper(top_k=k)(ids, x.clone()))


def test_created_by_name_and_in_a_chain() -> None:
    p = dk.create("top_k", k=5)
    assert isinstance(p, TopK) and p.params == TopKParams(k=5)
    assert dk.create("top_k", 5).spec() == {"name": "top_k", "params": {"k": 5}}
    assert dk.Chain.parse("top_k(5) | greedy").to_spec()[0] == p.spec()


@pytest.mark.parametrize("bad", [{"k": 0}, {"k": -3}, {"k": 2.5}])
def test_bad_k_names_parameter_value_and_range(bad: dict[str, object]) -> None:
    with pytest.raises(dk.ParameterError) as e:
        dk.create("top_k", **bad)
    msg = str(e.value)
    assert "k=" in msg and repr(bad["k"]) in msg and "1 <= k" in msg
    with pytest.raises(dk.ParameterError):
        TopK(**bad)


def test_unknown_parameter() -> None:
    with pytest.raises(dk.ParameterError, match=r"unknown parameter p=0\.5; allowed parameters: k"):
        dk.create("top_k", p=0.5)


class TestTopKConformance(ProcessorConformance):
    def make(self) -> TopK:
        return TopK(k=3)


class TestTopKGridConformance(ProcessorConformance):
    vocab_size = 1000  # large enough for the grouped search

    def make(self) -> TopK:
        return TopK(k=5)


class DropsTies(TopK):
    """A broken top-k: exactly k tokens, ties at the k-th dropped by position."""

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        idx = logits.topk(self.params.k).indices
        return torch.full_like(logits, NEG).scatter(1, idx, logits.gather(1, idx))


def test_the_kit_catches_a_top_k_that_drops_ties() -> None:
    with pytest.raises(AssertionError, match="removed"):
        check_processor(DropsTies(k=3))


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once, reuses its kernels
def test_compiled_chains_that_differ_in_k_each_run_their_own_step() -> None:
    """Dynamo keeps compiled steps per code object (`Chain._select`), and its automatic dynamic shapes are
    keyed by file, line and name: after a chain compiled at other shapes, an int parameter that differs
    between chains turns symbolic. Each chain must still pick its own eager tokens: a guard filter that
    dropped the guards on the chain ran top_k(1)'s step for top_k(40) here (docs/benchmarks.md)."""
    other = dk.Chain.parse("temperature(0.8) | top_k(5) | sample").compiled()
    try:
        for history in (3, 4):  # a recompile: the history becomes dynamic
            warm = ctx_for(2, history=history, step=1)
            warm.draw_uniforms()  # as a compiled decode does: one graph, not one split at `sample`'s generator
            other.step(torch.randn(2, 101), warm)
        x = torch.randn(2, 300, generator=torch.Generator().manual_seed(0)) * 3
        for k in (1, 40):  # top_k(1) always picks the argmax, top_k(40) draws among 40
            chain = dk.Chain.parse(f"top_k({k}) | sample")
            compiled, ctx = chain.compiled(), ctx_for(2, history=10, step=2, seed=k)
            for _ in range(6):
                eager = ctx.fork()
                ctx.draw_uniforms()
                assert torch.equal(compiled.step(x, ctx).tokens, chain.step(x, eager).tokens)
    finally:  # the vocabulary turned dynamic here would break a later test's fullgraph compile
        torch._dynamo.reset()

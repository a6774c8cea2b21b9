"""The core `sample` selector: distribution (chi-square), -inf never drawn, per-row generators, no sync; the kit."""

from __future__ import annotations

from functools import partial

import pytest
import torch

import decodekit as dk
from decodekit.context import row_generators
from decodekit.sample import Sample, inverse_cdf, sorted_position
from decodekit.stage import Candidates, densify
from decodekit.testing import NEG, SelectorConformance, check_selector, ctx_for
from decodekit.testing.selectors import check_selector_distribution


def softmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.double().softmax(-1)


def test_draws_a_hand_made_four_token_distribution() -> None:
    # probabilities 0.1, 0.2, 0.3, 0.4: 20,000 seeded draws, dense and on candidates, chi-square p > 1e-3
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))
    check_selector_distribution(Sample(), softmax, logits=logits, draws=20_000, seed=1)


def test_the_chi_square_test_rejects_a_wrong_distribution() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))

    def sharper(x: torch.Tensor) -> torch.Tensor:  # what sample at temperature 0.8 would draw
        return (x.double() / 0.8).softmax(-1)

    with pytest.raises(AssertionError, match="do not fit"):
        check_selector_distribution(Sample(), sharper, logits=logits, draws=20_000, seed=1)


def test_removed_tokens_are_never_drawn() -> None:
    logits = torch.tensor(
        [
            [NEG, 0.0, NEG, 0.0, NEG],  # removed tokens around and between the kept ones
            [NEG, NEG, NEG, NEG, 3.0],  # only the last token
            [3.0, NEG, NEG, NEG, NEG],  # only the first token
            [3.0e38, NEG, 3.0e38, NEG, NEG],  # extreme: exp overflows unless shifted
            [-3.0e38, NEG, 3.0e38, NEG, -1.0e30],  # extreme spread: the shift underflows to -inf
            [-1.0e4, NEG, -1.0e4 + 1, NEG, NEG],  # all very negative
        ]
    )
    allowed = [{1, 3}, {4}, {0}, {0, 2}, {2}, {0, 2}]
    n = 2000
    tokens = Sample()(logits.repeat(n, 1), ctx_for(6 * n)).view(n, 6)
    for row, ok in enumerate(allowed):
        assert set(tokens[:, row].tolist()) <= ok, (row, set(tokens[:, row].tolist()))
    assert set(tokens[:, 0].tolist()) == {1, 3}


def test_uniform_draws_at_the_edges_never_land_on_a_removed_token() -> None:
    logits = torch.tensor([[1.0, 2.0, NEG, NEG], [NEG, 5.0, NEG, NEG], [1e-3, 0.0, 1e-3, NEG]])
    for u in (0.0, 0.5, 1.0 - 2.0**-24, 1.0):  # 1.0 is out of range but must still be safe
        picked = inverse_cdf(logits, torch.full((3, 1), u))
        assert picked.tolist()[1] == [1]
        assert bool(torch.isfinite(logits.gather(1, picked)).all()), u


def test_inverse_cdf_hand_worked() -> None:
    # probabilities 0.1, 0.2, 0.3, 0.4: CDF 0.1, 0.3, 0.6, 1.0
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]]))
    for u, expected in ((0.05, 0), (0.15, 1), (0.29, 1), (0.31, 2), (0.59, 2), (0.61, 3), (0.99, 3)):
        assert inverse_cdf(logits, torch.tensor([[u]])).tolist() == [[expected]], u


def test_a_rows_draws_do_not_depend_on_the_other_rows() -> None:
    g = torch.Generator().manual_seed(0)
    alone_logits = torch.randn(1, 50, generator=g)
    batch_logits = torch.cat([alone_logits, torch.randn(4, 50, generator=g)])
    alone, batch = ctx_for(1, seed=7), ctx_for(5, seed=7)
    for _ in range(30):  # thirty steps: the row's stream advances the same way in both
        assert Sample()(alone_logits, alone).item() == Sample()(batch_logits, batch)[0].item()


def test_same_seed_same_draws_other_seed_other_draws() -> None:
    logits = torch.zeros(64, 100)
    a = Sample()(logits, ctx_for(64, seed=3))
    assert torch.equal(a, Sample()(logits, ctx_for(64, seed=3)))
    assert not torch.equal(a, Sample()(logits, ctx_for(64, seed=4)))


def block_host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every tensor -> Python conversion (a device sync on an accelerator) fail."""

    def sync(*args: object, **kwargs: object) -> None:
        raise AssertionError("host sync")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, sync)


def test_sample_does_not_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = ctx_for(3)  # built before: checking the history and seeding generators is not part of the step
    block_host_reads(monkeypatch)
    logits = torch.randn(3, 1000)
    Sample()(logits, ctx)
    values, indices = logits.topk(10)
    Sample().select_candidates(Candidates(values, indices), ctx)


def test_registered_as_the_default_selector() -> None:
    s = dk.create("sample")
    assert isinstance(s, Sample) and s.spec() == {"name": "sample", "params": {}}
    assert isinstance(dk.Chain([]).selector, Sample)


class TestSampleConformance(SelectorConformance):
    def make(self) -> Sample:
        return Sample()

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return softmax(logits)


def test_check_selector_passes_on_sample() -> None:
    check_selector(Sample(), distribution=softmax)


def test_a_row_that_cannot_be_sampled_is_marked_by_the_chain_on_both_paths() -> None:
    nan, inf = float("nan"), float("inf")
    logits = torch.tensor([[0.0, nan, 1.0], [0.0, inf, 1.0], [NEG, NEG, NEG], [0.0, 1.0, NEG]])
    dense = Sample()(logits, ctx_for(4))
    assert bool(((dense >= 0) & (dense < 3)).all()) and dense.tolist()[3] in (0, 1)  # ids in range, no error
    values, indices = logits.sort(-1, descending=True)  # NaN sorts first, as the max
    fast = Sample().select_candidates(Candidates(values, indices), ctx_for(4))
    assert torch.equal(fast, dense)
    chain = dk.Chain([])
    for x in (logits, Candidates(values, indices)):
        assert chain._pick(x, 3, ctx_for(4)).tolist() == [-1, -1, -1, dense.tolist()[3]]


def test_candidates_pick_the_same_token_alone_in_a_batch_and_densely() -> None:
    # A row alone and in a batch agree, with each other and with the dense call, at every draw,
    # including a row that cannot be sampled (NaN), one whose only candidate is finite and one
    # with -inf padding.
    nan = float("nan")
    g = torch.Generator().manual_seed(3)
    values = torch.randn(4, 6, generator=g).sort(-1, descending=True).values
    values[1] = torch.tensor([nan, 2.0, 1.0, 0.0, -1.0, -2.0])
    values[2, 1:] = NEG
    values[3, 4:] = NEG
    ids = torch.stack([torch.randperm(50, generator=g)[:6] for _ in range(4)])
    seeds = [11, 12, 13, 14]

    def ctx_of(row_seeds: list[int]) -> dk.DecodeContext:  # row b's generator from its own seed only
        n = len(row_seeds)
        return dk.DecodeContext(tokens=torch.zeros(n, 1, dtype=torch.long), generators=row_generators(row_seeds, n))

    batch, alone, dense_ctx = ctx_of(seeds), [ctx_of([s]) for s in seeds], ctx_of(seeds)
    dense_logits = densify(Candidates(values, ids), 50)
    for _ in range(200):
        in_batch = Sample().select_candidates(Candidates(values, ids), batch).tolist()
        rows = [
            Sample().select_candidates(Candidates(values[b : b + 1], ids[b : b + 1]), alone[b]).item() for b in range(4)
        ]
        dense = Sample()(dense_logits, dense_ctx).tolist()
        assert in_batch == rows and 0 <= in_batch[1] < 50  # row 1 (NaN): any id in range, the chain marks it
        assert [dense[b] for b in (0, 2, 3)] == [in_batch[b] for b in (0, 2, 3)]
        assert in_batch[2] == ids[2, 0].item() and in_batch[3] in ids[3, :4].tolist()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_summed_in_float32(dtype: torch.dtype) -> None:
    # 50,000 tokens: a CDF summed in bfloat16 stops growing long before the end of the row
    # (8 bits of mantissa), which would make the tail tokens undrawable.
    logits = torch.randn(2, 50_000, generator=torch.Generator().manual_seed(0)).to(dtype)
    for seed in range(5):
        assert torch.equal(Sample()(logits, ctx_for(2, seed=seed)), Sample()(logits.float(), ctx_for(2, seed=seed)))
        u = torch.rand(2, 1, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(inverse_cdf(logits, u), inverse_cdf(logits.float(), u))


@pytest.mark.parametrize("right", [False, True])
def test_sorted_position_under_compile_is_searchsorted(right: bool) -> None:
    """The count a compiled step uses for a position in sorted rows equals searchsorted's, ties and ends included."""
    g = torch.Generator().manual_seed(3)
    cum = (torch.rand(4, 57, generator=g) * 4).round().cumsum(-1)  # ties: many steps of 0
    cum[3] = 0.0  # a row with no mass
    ends = [cum[:, :1], cum[:, 20:21], cum[:, -1:], cum[:, -1:] + 1, cum[:, 30:31] - 0.5, cum[:, :1] - 1]
    targets = [t.contiguous() for t in ends]
    compiled = torch.compile(partial(sorted_position, right=right), fullgraph=True, backend="eager")
    for target in targets:
        assert torch.equal(compiled(cum, target), torch.searchsorted(cum, target, right=right))
        assert torch.equal(sorted_position(cum, target, right=right), torch.searchsorted(cum, target, right=right))

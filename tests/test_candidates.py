"""`decodekit.candidates.top_candidates`: the grid search for the top k (ties included) against a full sort."""

from __future__ import annotations

import pytest
import torch

from decodekit.candidates import _grid_rows, top_candidates, top_candidates_after
from decodekit.stage import densify

NEG = float("-inf")


def reference(x: torch.Tensor, k: int) -> torch.Tensor:
    """Keep every logit >= the k-th largest (sorting the whole row)."""
    kth = x.sort(-1, descending=True).values[:, k - 1 : k]
    return torch.where(x >= kth, x, NEG)


@pytest.mark.parametrize("vocab", [1000, 1009, 4096, 50_257])  # grid without and with a tail
@pytest.mark.parametrize("ties", [False, True])
def test_candidate_search_equals_a_full_sort(vocab: int, ties: bool) -> None:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(3, vocab, generator=g) * 3
    if ties:  # bfloat16-like logits: many tokens share the k-th value
        x = (x * 2).round() / 2
    x[1, : vocab // 2] = NEG
    for k in (1, 5, 20):
        c = top_candidates(x, k)
        assert torch.equal(densify(c, vocab), reference(x, k)), (vocab, ties, k)
        assert bool((c.values[:, 1:] <= c.values[:, :-1]).all())


def test_candidate_search_when_a_tie_is_outside_the_pooled_groups() -> None:
    vocab = 1024
    R = _grid_rows(vocab)
    C = vocab // R
    x = torch.zeros(1, vocab)
    x[0, :3] = torch.tensor([9.0, 8.0, 7.0])  # groups 0, 1, 2
    x[0, C + 3] = 7.0  # group 3, tied with the 3rd largest: must be found although only 3 groups are pooled
    c = top_candidates(x, 3)
    assert sorted(zip(c.values[0].tolist(), c.indices[0].tolist()), reverse=True)[:4] == [
        (9.0, 0),
        (8.0, 1),
        (7.0, C + 3),
        (7.0, 2),
    ]
    assert torch.equal(densify(c, vocab), reference(x, 3))


def test_candidate_search_on_a_constant_row_keeps_everything() -> None:
    x = torch.ones(2, 2048)
    c = top_candidates(x, 4)
    assert c.values.shape == (2, 2048) and bool((c.values == 1).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype: torch.dtype) -> None:
    x = (torch.randn(2, 4096, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    c = top_candidates(x, 10)
    assert c.values.dtype == dtype
    assert torch.equal(densify(c, 4096), reference(x, 10))


@pytest.mark.parametrize("vocab", [1009, 4096, 50_257])  # with and without a tail past the grid
def test_after_a_monotone_map_equals_the_search_on_the_mapped_logits(vocab: int) -> None:
    x = torch.randn(4, vocab, generator=torch.Generator().manual_seed(3)) * 3
    for k in (1, 5, 20) if vocab > 1009 else (1, 5):
        for f in (lambda t: t / 0.7, lambda t: t * 2.5, lambda t: t - 4.0):
            c = top_candidates_after(x, k, f)
            assert c is not None  # continuous logits: no tie at the k-th, before or after the map
            assert torch.equal(densify(c, vocab), reference(f(x), k))


def test_after_a_map_that_ties_the_kth_value_gives_up() -> None:
    x = torch.randn(2, 4096, generator=torch.Generator().manual_seed(4))
    assert top_candidates_after(x, 5, lambda t: t * 0.0) is None  # every token ties after the map
    assert top_candidates_after(torch.randn(2, 300), 5, lambda t: t) is None  # too small for the grid

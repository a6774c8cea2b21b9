"""`decodekit.candidates`: the grid search for the n largest logits and its bound, against a full sort."""

from __future__ import annotations

import pytest
import torch
from fresh_interpreter import loads_the_compiler

from decodekit.candidates import _grid, keep_at_least, top_candidates
from decodekit.stage import densify
from decodekit.testing import NEG


def check_top(x: torch.Tensor, n: int) -> None:
    """The listed values are the row's n largest in order, and no logit left out exceeds the bound."""
    c, bound = top_candidates(x, n)
    V = x.shape[1]
    expected = x.sort(-1, descending=True).values[:, : min(n, V)]
    assert torch.equal(c.values, expected), (V, n)
    assert torch.equal(x.gather(1, c.indices), c.values)  # the ids are those of the values
    left_out = densify(c, V) == NEG  # listed -inf values count as left out too: harmless
    assert bool((x.masked_fill(~left_out, NEG) <= bound).all()), (V, n)


@pytest.mark.parametrize("vocab", [1000, 1009, 4096, 50_257])  # grid without and with a tail
@pytest.mark.parametrize("ties", [False, True])
def test_the_n_largest_and_the_bound_equal_a_full_sort(vocab: int, ties: bool) -> None:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(3, vocab, generator=g) * 3
    if ties:  # bfloat16-like logits: many tokens share a value
        x = (x * 2).round() / 2
    x[1, : vocab // 2] = NEG
    for n in (1, 5, 20, 256, vocab):
        check_top(x, n)


def test_a_tie_outside_the_pooled_groups_shows_in_the_bound() -> None:
    vocab = 1024
    _, C = _grid(vocab, 2)
    x = torch.zeros(1, vocab)
    x[0, :3] = torch.tensor([9.0, 8.0, 7.0])  # groups 0, 1, 2
    x[0, C + 3] = 7.0  # group 3, tied with the 3rd largest
    c, bound = top_candidates(x, 2)  # pools 3 groups: the tie may be left out, so the bound reaches it
    assert c.values.tolist() == [[9.0, 8.0]] and float(bound) == 7.0
    floor = c.values[:, 1:2]
    assert torch.equal(keep_at_least(c, floor, floor > bound).values, c.values)  # 8 > 7: the set holds
    kept = keep_at_least(*top_candidates(x, 3)[:1], torch.tensor([[7.0]]), torch.tensor([[False]]))
    assert bool(kept.values.isnan().all())  # a row that may not hold is NaN for the chain to redo


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_every_float_dtype(dtype: torch.dtype) -> None:
    x = (torch.randn(2, 4096, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    c, bound = top_candidates(x, 10)
    assert c.values.dtype == bound.dtype == dtype
    check_top(x, 10)


def test_nan_counts_as_largest() -> None:
    x = torch.randn(2, 4096, generator=torch.Generator().manual_seed(2))
    x[0, 4000] = float("nan")
    c, _ = top_candidates(x, 10)
    assert c.indices[0, 0] == 4000 and not bool(c.values[1].isnan().any())


def test_the_grid_search_loads_no_compiler() -> None:
    """Importing torch's compiler costs ~1.6 s: a decode that never compiles (every command line run with a
    truncation in its chain) must not pay it for the grid's plan."""
    code = (
        "import torch\n"
        "from decodekit.candidates import top_candidates\n"
        "c, bound = top_candidates(torch.randn(2, 1000), 5)\n"
        "assert c.values.shape == (2, 5)\n"
    )
    assert not loads_the_compiler(code)


def test_the_grid_plan_folds_into_a_compiled_graph() -> None:
    """Under `torch.compile` the plan is plain arithmetic on the static sizes: one graph, no break."""
    compiled = torch.compile(lambda x: top_candidates(x, 5)[0].values, fullgraph=True, backend="eager")
    x = torch.randn(2, 50_257, generator=torch.Generator().manual_seed(0))
    assert torch.equal(compiled(x), x.topk(5).values)


@pytest.mark.parametrize("vocab", [4096, 1009])  # grid without and with a tail
def test_rows_of_a_wider_tensor(vocab: int) -> None:
    """Logits that are a column slice of a wider tensor (a row stride past V) give a full sort's candidates."""
    g = torch.Generator().manual_seed(vocab)
    wide = torch.randn(3, vocab + 7, generator=g) * 3
    x = wide[:, 2 : vocab + 2]
    assert x.stride(0) == vocab + 7
    for n in (1, 5, 20):
        check_top(x, n)

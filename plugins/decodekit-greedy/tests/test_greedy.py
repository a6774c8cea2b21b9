"""greedy: argmax with the lowest id on ties, on dense logits and on candidates; the kit."""

from __future__ import annotations

import pytest
import torch
from decodekit_greedy.greedy import Greedy

import decodekit as dk
from decodekit.context import row_generators
from decodekit.stage import Candidates
from decodekit.testing import NEG, SelectorConformance, check_selector, ctx_for


def test_picks_the_largest_logit() -> None:
    x = torch.tensor([[0.1, 2.5, -1.0, NEG], [NEG, NEG, -3.0, -4.0]])
    assert Greedy()(x, ctx_for(2)).tolist() == [1, 2]


def test_ties_go_to_the_lowest_token_id() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0]])
    assert Greedy()(x, ctx_for()).tolist() == [1]
    # candidates sorted by value, the tied maxima in an arbitrary token order
    c = Candidates(torch.tensor([[3.0, 3.0, 3.0, 1.0]]), torch.tensor([[4, 2, 1, 0]]))
    assert Greedy().select_candidates(c, ctx_for()).tolist() == [1]


def test_draws_no_random_numbers() -> None:
    x = torch.randn(3, 20, generator=torch.Generator().manual_seed(0))
    gens = row_generators(0, 3)
    states = [g.get_state() for g in gens]
    Greedy()(x, dk.DecodeContext(tokens=torch.zeros(3, 1, dtype=torch.long), generators=gens))
    assert all(torch.equal(g.get_state(), s) for g, s in zip(gens, states))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype: torch.dtype) -> None:
    x = torch.tensor([[0.5, 2.0, 2.0, NEG]], dtype=dtype)
    assert Greedy()(x, ctx_for()).tolist() == [1]


def test_created_by_name_and_as_the_chain_selector() -> None:
    g = dk.create("greedy")
    assert isinstance(g, Greedy) and g.spec() == {"name": "greedy", "params": {}}
    chain = dk.Chain.parse("top_k(3) | greedy")
    assert isinstance(chain.selector, Greedy)
    x = torch.tensor([[0.0, 5.0, 1.0, 5.0, 2.0]])
    assert chain(x, ctx_for()).tolist() == [1]


def test_takes_no_parameters() -> None:
    with pytest.raises(dk.ParameterError, match=r"greedy: unknown parameter k=1; allowed parameters: none"):
        dk.create("greedy", k=1)


def one_hot_argmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()


class TestGreedyConformance(SelectorConformance):
    def make(self) -> Greedy:
        return Greedy()

    def distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return one_hot_argmax(logits)


class LastOnTies(Greedy):
    """A broken greedy: on candidates, the first candidate whatever its token id."""

    def select_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> torch.Tensor:
        return c.indices[:, 0]


def test_the_kit_catches_a_candidate_path_that_ignores_the_tie_rule() -> None:
    with pytest.raises(AssertionError, match="select_candidates"):
        check_selector(LastOnTies(), vocab_size=8, batch_size=64)  # logits rounded to halves tie often

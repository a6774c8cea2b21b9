"""temperature: hand-worked scaling, T = 0 as greedy (ties: lowest id), candidates, HF parity, the kit."""

from __future__ import annotations

import pytest
import torch
from decodekit_temperature.params import GREEDY_BELOW, TemperatureParams
from decodekit_temperature.temperature import Temperature

import decodekit as dk
from decodekit.context import row_generators
from decodekit.stage import Candidates
from decodekit.testing import NEG, ProcessorConformance, check_processor, ctx_for


def test_divides_by_t() -> None:
    x = torch.tensor([[2.0, -1.0, NEG, 0.5]])
    assert torch.equal(Temperature(value=0.5)(x, ctx_for()), torch.tensor([[4.0, -2.0, NEG, 1.0]]))
    assert torch.equal(Temperature(value=2.0)(x, ctx_for()), torch.tensor([[1.0, -0.5, NEG, 0.25]]))


def test_sharpens_and_flattens_the_distribution() -> None:
    # softmax([ln 3, 0]) = (0.75, 0.25); at T = 0.5 it is (9/10, 1/10); at T = 2, (sqrt3, 1)/(sqrt3 + 1)
    x = torch.log(torch.tensor([[3.0, 1.0]]))
    sharp = Temperature(value=0.5)(x, ctx_for()).softmax(-1)
    flat = Temperature(value=2.0)(x, ctx_for()).softmax(-1)
    assert torch.allclose(sharp, torch.tensor([[0.9, 0.1]]))
    assert torch.allclose(flat, torch.tensor([[3**0.5, 1.0]]) / (3**0.5 + 1))


def test_one_is_a_no_op() -> None:
    x = torch.tensor([[1.0, 2.0]])
    assert Temperature(value=1.0)(x, ctx_for()) is x


def test_zero_keeps_only_the_argmax() -> None:
    x = torch.tensor([[0.5, 3.0, -1.0, NEG], [2.0, 1.0, 0.0, 1.5]])
    out = Temperature(value=0.0)(x, ctx_for(2))
    assert torch.equal(out, torch.tensor([[NEG, 3.0, NEG, NEG], [2.0, NEG, NEG, NEG]]))


def test_zero_breaks_ties_by_the_lowest_token_id() -> None:
    x = torch.tensor([[1.0, 4.0, 2.0, 4.0, 4.0]])
    assert torch.equal(Temperature(value=0.0)(x, ctx_for()), torch.tensor([[NEG, 4.0, NEG, NEG, NEG]]))
    # on candidates whose tied maxima come in an arbitrary token order
    c = Candidates(torch.tensor([[4.0, 4.0, 4.0, 2.0]]), torch.tensor([[4, 3, 1, 2]]))
    on = Temperature(value=0.0).on_candidates(c, ctx_for())
    assert on.values.tolist() == [[4.0]] and on.indices.tolist() == [[1]]
    to = Temperature(value=0.0).to_candidates(x, ctx_for())
    assert to is not None and to.indices.tolist() == [[1]] and to.values.tolist() == [[4.0]]


def test_greedy_starts_strictly_below_the_bound() -> None:
    # vLLM's sampler: T < 1e-5 is greedy, T = 1e-5 divides. At the bound two tied maxima both stay (divided:
    # 2 / 1e-5 = 2e5, exact to float32's rounding), and a third token too; one float32 step below, the first alone.
    x = torch.tensor([[2.0, 2.0, 0.0]])
    at = Temperature(value=GREEDY_BELOW)(x, ctx_for())
    assert torch.allclose(at, torch.tensor([[2e5, 2e5, 0.0]]))
    below = float(
        torch.nextafter(torch.tensor(GREEDY_BELOW, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64))
    )
    assert torch.equal(Temperature(value=below)(x, ctx_for()), torch.tensor([[2.0, NEG, NEG]]))


def test_zero_then_sample_is_greedy() -> None:
    x = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    chain = dk.Chain([Temperature(value=0.0)])
    ctx = dk.DecodeContext(tokens=torch.zeros(8, 1, dtype=torch.long), generators=row_generators(0, 8))
    assert torch.equal(chain(x, ctx), x.argmax(-1))


def test_on_candidates_divides_the_values_and_keeps_the_order() -> None:
    c = Candidates(torch.tensor([[3.0, 1.0, NEG]]), torch.tensor([[5, 0, 2]]))
    on = Temperature(value=0.5).on_candidates(c, ctx_for())
    assert on.values.tolist() == [[6.0, 2.0, NEG]] and on.indices.tolist() == [[5, 0, 2]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype: torch.dtype) -> None:
    x = torch.tensor([[2.0, -1.0, NEG]], dtype=dtype)
    out = Temperature(value=0.5)(x, ctx_for())
    assert out.dtype == dtype and out.tolist() == [[4.0, -2.0, NEG]]


@pytest.mark.parametrize("t", [0.3, 0.8, 1.7])
def test_matches_transformers(t: float) -> None:
    from transformers import TemperatureLogitsWarper

    x = torch.randn(4, 100, generator=torch.Generator().manual_seed(0)) * 3
    x[0, :10] = NEG
    theirs = TemperatureLogitsWarper(temperature=t)(torch.zeros(4, 1, dtype=torch.long), x.clone())
    assert torch.equal(Temperature(value=t)(x, ctx_for(4)), theirs)


def test_created_by_name() -> None:
    p = dk.create("temperature", value=0.8)
    assert isinstance(p, Temperature) and p.params == TemperatureParams(value=0.8)
    assert dk.create("temperature", 0.8).spec() == {"name": "temperature", "params": {"value": 0.8}}


@pytest.mark.parametrize("bad", [-1, -0.01, float("inf"), float("nan")])
def test_bad_values_name_parameter_value_and_range(bad: float) -> None:
    with pytest.raises(dk.ParameterError) as e:
        dk.create("temperature", value=bad)
    assert f"value={bad!r}" in str(e.value) and "0 <= value" in str(e.value)
    with pytest.raises(dk.ParameterError):
        Temperature(value=bad)


def test_unknown_parameter() -> None:
    with pytest.raises(dk.ParameterError, match=r"unknown parameter t=0\.8; allowed parameters: value"):
        dk.create("temperature", t=0.8)


class TestTemperatureConformance(ProcessorConformance):
    def make(self) -> Temperature:
        return Temperature(value=0.7)


class TestTemperatureZeroConformance(ProcessorConformance):
    def make(self) -> Temperature:
        return Temperature(value=0.0)


class InPlace(Temperature):
    """A broken temperature: divides its input in place."""

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits.div_(self.params.value)


def test_the_kit_catches_a_processor_that_modifies_its_input() -> None:
    with pytest.raises(AssertionError, match="modified its input in place"):
        check_processor(InPlace(value=0.5))

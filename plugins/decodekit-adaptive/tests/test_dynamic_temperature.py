"""Dynamic temperature (llama.cpp temp_ext), worked by hand on p = [0.5, 0.25, 0.25]."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import decodekit as dk

INF = float("-inf")
# H = 0.5 ln 2 + 2 * 0.25 ln 4 = 0.346574 + 0.693147 = 1.039721 nats; max H = ln 3 = 1.098612;
# normalised entropy 1.039721 / 1.098612 = 0.946395.
P3 = [0.5, 0.25, 0.25]


def apply(probs: list[float], **params: float) -> Tensor:
    x = torch.tensor([probs]).log()
    out: Tensor = dk.create("dynamic_temperature", **params)(
        x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long))
    )
    return out


@pytest.mark.parametrize(
    ("params", "temperature"),
    [
        ({"temp": 1.0, "delta": 0.5, "exponent": 1.0}, 1.446395),  # 0.5 + (1.5 - 0.5) * 0.946395
        ({"temp": 1.0, "delta": 0.5, "exponent": 2.0}, 1.395664),  # 0.5 + 1.0 * 0.946395**2 = 0.5 + 0.895664
        ({"temp": 0.3, "delta": 0.5, "exponent": 1.0}, 0.757116),  # low max(0, -0.2) = 0, high 0.8: 0.8 * 0.946395
        ({"temp": 0.8, "delta": 0.0, "exponent": 1.0}, 0.8),  # delta 0: a plain temperature
    ],
)
def test_temperature_from_normalised_entropy(params: dict[str, float], temperature: float) -> None:
    expected = torch.tensor([P3]).log() / temperature
    assert torch.allclose(apply(P3, **params), expected, atol=1e-5)


def test_removed_tokens_are_not_candidates() -> None:
    # n counts finite logits only: the same temperature as without the removed token.
    out = apply([0.5, 0.25, 0.25, 0.0], temp=1.0, delta=0.5)
    assert torch.isneginf(out[0, 3])
    assert torch.allclose(out[:, :3], torch.tensor([P3]).log() / 1.446395, atol=1e-5)


def test_llama_cpp_cases_temperature_zero_and_one() -> None:
    # test_temp_ext(p = [0.1, 0.2, 0.3, 0.4], temp 1, delta 0): unchanged; temp 0: only the argmax.
    p4 = [0.1, 0.2, 0.3, 0.4]
    assert torch.allclose(apply(p4, temp=1.0, delta=0.0).softmax(-1), torch.tensor([p4]))
    assert apply(p4, temp=0.0, delta=0.0).softmax(-1).tolist() == [[0.0, 0.0, 0.0, 1.0]]


def test_a_single_candidate_is_left_alone() -> None:
    out = apply([1.0, 0.0, 0.0], temp=1.0, delta=0.5)
    assert out[0, 0] == 0.0 and torch.isneginf(out[0, 1:]).all()


def test_flat_rows_get_hotter_than_peaked_rows() -> None:
    x = torch.stack([torch.zeros(10), torch.arange(10.0) * 3])  # uniform (H_norm 1) and peaked
    out = dk.create("dynamic_temperature", 1.0, 0.5)(x, dk.DecodeContext(tokens=torch.zeros(2, 1, dtype=torch.long)))
    t_peaked = (x[1, 9] - x[1, 0]) / (out[1, 9] - out[1, 0])
    assert torch.equal(out[0], x[0])  # all zeros stay zeros whatever the temperature
    assert 0.5 <= float(t_peaked) < 0.6


EXTREMES = [0.0, 1e-300, 1e-6, 1.0, 1e4]  # temp and delta: 0 to their bound of 1e4


@pytest.mark.parametrize("exponent", [0.0, 1e-300, 1.0, 1e10, 1e308, 1.7976931348623157e308])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_accepted_value_keeps_removed_tokens_removed(exponent: float, dtype: torch.dtype) -> None:
    """Flat rows of n candidates (normalised entropy 1 up to rounding, which once put it above 1: 1.0000001
    ** 1e10 = inf, and the removed tokens became -inf / inf = NaN), peaked rows and huge logits."""
    rows = []
    for n in range(2, 40):
        flat = torch.full((41,), INF)
        flat[:n] = 0.0
        rows.append(flat)
    rows.append(torch.cat([torch.arange(20.0) * 3, torch.full((21,), INF)]))  # peaked
    rows.append(torch.cat([torch.tensor([6e4, -6e4, 1.0]), torch.full((38,), INF)]))  # near float16's range
    x = torch.stack(rows).to(dtype)
    ctx = dk.DecodeContext(tokens=torch.zeros(len(rows), 1, dtype=torch.long))
    for temp in EXTREMES:
        for delta in EXTREMES:
            out = dk.create("dynamic_temperature", temp=temp, delta=delta, exponent=exponent)(x, ctx)
            where = f"temp={temp}, delta={delta}, exponent={exponent}, {dtype}"
            assert not out.isnan().any(), f"{where}: NaN in rows {out.isnan().any(-1).nonzero().flatten().tolist()}"
            assert torch.isneginf(out[torch.isneginf(x)]).all(), f"{where}: a removed token came back"
            assert (out > INF).any(-1).all(), f"{where}: a row lost every token"


def test_an_extreme_exponent_picks_a_token() -> None:
    """The reported failure: exponent=1e10 after a truncation that leaves a flat row (7 tied tokens of
    41) made the removed tokens NaN, and the chain refused the row with a NumericsError."""
    x = torch.cat([torch.zeros(1, 7), torch.full((1, 34), -5.0)], -1)
    chain = dk.Chain.parse("top_k(7) | dynamic_temperature(temp=1.0, delta=0.5, exponent=1e10) | sample")
    for seed in range(20):
        token = chain(x, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long), generators=None))
        assert 0 <= int(token) < 7, seed

"""The int8 backend: the conformance kit against a dequantised reference, hand-worked numbers, bytes."""

from __future__ import annotations

import pytest
import torch
from decodekit_cache_int8.storage import Int8Cache, dequantise, quantise

import decodekit as dk
from decodekit.testing import CacheConformance


def int8_round_trip(x: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 per (row, head, token), a second implementation in float64."""
    scale = x.double().abs().amax(-1, keepdim=True) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale)).float().double()
    return ((x.double() / scale).round().clamp(-127, 127) * scale).to(x.dtype)


class TestInt8Conformance(CacheConformance):
    in_place = False  # update hands out freshly dequantised keys

    def make(self, spec: dk.CacheSpec) -> Int8Cache:
        return Int8Cache(spec)

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        return int8_round_trip(x)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        # int8 entries plus one float32 scale per (row, head, token), for keys and values
        width = spec.head_dim + 4 + spec.value_width + 4
        return spec.n_layers * spec.batch_size * spec.capacity * spec.n_kv_heads * width


def test_hand_worked_quantisation() -> None:
    x = torch.tensor([[0.5, -1.27, 0.0, 0.011]])  # max |x| = 1.27 -> scale 0.01
    q, s = quantise(x)
    assert q.tolist() == [[50, -127, 0, 1]]
    torch.testing.assert_close(s, torch.tensor([[0.01]]))
    torch.testing.assert_close(dequantise(q, s, torch.float32), torch.tensor([[0.5, -1.27, 0.0, 0.01]]))
    zero_q, zero_s = quantise(torch.zeros(1, 3))
    assert zero_q.tolist() == [[0, 0, 0]] and zero_s.item() == 1.0  # exact, no division by zero


def test_error_is_at_most_half_a_step() -> None:
    x = torch.randn(4, 2, 50, 24) * torch.logspace(-3, 2, 24)  # channels of very different scales
    q, s = quantise(x)
    assert bool(((dequantise(q, s, torch.float32) - x).abs() <= s / 2 + 1e-7).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_in_half_precision_the_error_is_half_a_step_and_the_dtype_rounding(dtype: torch.dtype) -> None:
    """docs/caches.md: `s/2`, then `q·s` rounded to the model's dtype (half a unit in its last place: bfloat16 has 8
    bits, float16 11), which alone reaches 1.8x `s/2` in bfloat16."""
    x = (torch.randn(1000, 64, generator=torch.Generator().manual_seed(0)) * torch.logspace(-3, 3, 1000)[:, None]).to(
        dtype
    )
    q, s = quantise(x)
    back = dequantise(q, s, dtype).float()
    unit = 2.0 ** -(8 if dtype == torch.bfloat16 else 11)
    assert bool(((back - x.float()).abs() <= s / 2 * (1 + 1e-6) + back.abs() * unit).all())
    assert float(((back - x.float()).abs() / (s / 2)).max()) > 1.05  # the rounding shows: s/2 alone is not the bound


def test_a_nan_key_reads_back_nan_as_in_a_float_cache() -> None:
    """A NaN key (a float16 model that overflowed) stays NaN, so attention over it is NaN and the decode fails with
    NumericsError as over a float storage. Its scale was replaced by 1, as an all-zero vector's is, and the vector
    rounded at that step: NaN read back as 0, 0.3 as 0 (a transformers Llama with a NaN in a k_proj weight:
    window(size=4) and h2o(budget=16) raised NumericsError, over store='int8' they gave tokens)."""
    q, s = quantise(torch.tensor([[float("nan"), 0.3, -0.02], [0.0, 0.3, -0.02]]))
    back = dequantise(q, s, torch.float32)
    assert back[0].isnan().all()
    torch.testing.assert_close(back[1], torch.tensor([0.0, 0.3, -0.02]), atol=0.3 / 254, rtol=0)  # the rest as ever


def test_bytes_are_under_035x_of_float32_gqa_on_the_default_shape() -> None:
    spec = dk.CacheSpec(n_layers=4, n_heads=8, n_kv_heads=2, head_dim=24, batch_size=1, capacity=256)
    ratio = Int8Cache(spec).nbytes / dk.create_cache("gqa", spec).nbytes  # type: ignore[attr-defined]  # nbytes: not in KVCache
    assert ratio == (24 + 4) / (4 * 24)  # 0.2917
    assert ratio <= 0.35

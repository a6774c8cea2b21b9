"""The window backend through the conformance kit: float and int8 storage, one size and per-layer sizes."""

from __future__ import annotations

import torch
from decodekit_cache_int8.storage import dequantise, quantise
from decodekit_cache_window import WindowCache, WindowParams

import decodekit as dk
from decodekit.testing import CacheConformance

SIZES = [5, 3]  # per layer, in the kit's 2-layer spec
SINKS, SLACK = 2, 3


def window_kept(size: int, sinks: int, query: int, first: int) -> dict[int, int]:
    """StreamingLLM, as this backend states it: the last `size` slots (the query's own included) at
    their positions, and the sinks moved to sit just before them."""
    recent = range(max(0, query - size + 1), query + 1)
    delta = max(0, query - size - sinks + 1)
    seen = {t: t + delta for t in range(min(sinks, query + 1))}
    seen.update({t: t for t in recent})
    return seen


class TestWindowConformance(CacheConformance):
    store = "gqa"

    def params(self) -> WindowParams:
        return WindowParams(size=SIZES, sinks=SINKS, slack=SLACK, store=self.store)

    def make(self, spec: dk.CacheSpec) -> WindowCache:
        return WindowCache(spec, self.params())

    def kept(self, spec: dk.CacheSpec, layer: int, query: int, first: int) -> dict[int, int]:
        return window_kept(SIZES[layer], SINKS, query, first)

    def rollback(self, spec: dk.CacheSpec) -> int | None:
        return SLACK

    def slots(self) -> list[int]:
        return [SINKS + size + SLACK - 1 for size in SIZES]

    def nbytes(self, spec: dk.CacheSpec) -> int:
        item = torch.empty((), dtype=spec.dtype).element_size()
        return sum(2 * spec.batch_size * n * spec.n_kv_heads * spec.head_dim * item for n in self.slots())


def int8_round_trip(x: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 per (row, head, token): a second implementation, in float64."""
    scale = x.double().abs().amax(-1, keepdim=True) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale)).float().double()
    return (x.double() / scale).round().clamp(-127, 127) * scale


class TestWindowOverInt8Conformance(TestWindowConformance):
    store = "int8"
    in_place = False

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        return int8_round_trip(x).to(x.dtype)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return sum(2 * spec.batch_size * n * spec.n_kv_heads * (spec.head_dim + 4) for n in self.slots())


def test_kit_round_trip_matches_the_storage() -> None:
    x = torch.randn(2, 2, 5, 8)
    torch.testing.assert_close(dequantise(*quantise(x), torch.float32), int8_round_trip(x).float())

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


def _feed(cache: WindowCache, first: int, count: int) -> torch.Tensor:
    """Feed tokens `first ..` one at a time (keys and values drawn from their slot); the last attention output."""
    spec, out = cache.spec, torch.empty(0)
    for t in range(first, first + count):
        g = torch.Generator().manual_seed(t)
        k, v, q = (torch.randn(1, h, 1, spec.head_dim, generator=g) for h in (2, 2, spec.n_heads))
        for layer in range(spec.n_layers):
            keys, values = cache.update(layer, k, v)
            out = dk.cache.cached_attention(cache, layer, q, keys, values, torch.tensor([[t]]))
    return out


def test_a_second_crop_is_refused_once_the_first_crop_lost_its_window() -> None:
    """Before: crop measured what the ring holds from `length` alone, so after crop(28) a crop(26) was
    accepted though writing slots 28 and 29 had evicted 22 and 23, which the query at 26 needs: it then
    attended without them, silently. Now it names the range it can still take back."""
    spec = dk.CacheSpec(
        n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=1, rope_base=10000.0, max_positions=32
    )
    params = WindowParams(size=4, sinks=2, slack=3)  # a ring of 6: after 30 tokens it holds slots 24 .. 29
    cache = WindowCache(spec, params)
    _feed(cache, 0, 30)
    cache.crop(28)  # holds 24 .. 27 now: the query at 27 needs 24 .. 27
    try:
        cache.crop(26)
        raise AssertionError("crop(26) was accepted")
    except dk.ParameterError as exc:
        assert str(exc) == (
            "WindowCache.crop: n=26 is invalid: the window has evicted tokens the query at slot 26 would need "
            "(slack=3); allowed: 27 <= n <= 28"
        )
    cache.crop(27)
    fresh = WindowCache(spec, params)
    _feed(fresh, 0, 27)
    assert torch.allclose(_feed(cache, 27, 1), _feed(fresh, 27, 1), atol=1e-6)

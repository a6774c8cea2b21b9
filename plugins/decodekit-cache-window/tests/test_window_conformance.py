"""The window backend through the conformance kit: float and int8 storage, one size and per-layer sizes."""

from __future__ import annotations

import dataclasses

import pytest
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


def _feed_rows(cache: WindowCache, positions: list[int], count: int, seeds: list[int]) -> torch.Tensor:
    """Feed each row `count` tokens one at a time from its own position on, its keys and values drawn from its own
    seed and position; the last attention output `[B, H, 1, D]`."""
    spec, out = cache.spec, torch.empty(0)
    for i in range(count):
        drawn = []
        for p, s in zip(positions, seeds):
            g = torch.Generator().manual_seed(1000 * s + p + i)
            drawn.append([torch.randn(1, h, 1, spec.head_dim, generator=g) for h in (2, 2, spec.n_heads)])
        k, v, q = (torch.cat(x) for x in zip(*drawn))
        at = torch.tensor([[p + i] for p in positions])
        for layer in range(spec.n_layers):
            keys, values = cache.update(layer, k, v)
            out = dk.cache.cached_attention(cache, layer, q, keys, values, at)
    return out


def test_crop_rows_takes_each_row_back_as_alone_within_its_slack() -> None:
    """crop_rows: row 0 takes back 2 slots, row 1 three (moved one slot right); a row taken further back than its ring
    holds is refused, naming the range; a row that keeps none of its tokens starts afresh. Each row then attends as a
    row alone fed only what it kept."""
    spec = dk.CacheSpec(
        n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=2, capacity=1, rope_base=10000.0, max_positions=32
    )
    params = WindowParams(size=4, sinks=2, slack=3)  # a ring of 6: after 30 tokens it holds slots 24 .. 29

    def alone(seed: int, kept: int, then: int) -> torch.Tensor:
        cache = WindowCache(dataclasses.replace(spec, batch_size=1), params)
        _feed_rows(cache, [0], kept, [seed])
        return _feed_rows(cache, [kept], then, [seed])[0]

    cache = WindowCache(spec, params)
    _feed_rows(cache, [0, 0], 30, [1, 2])
    with pytest.raises(dk.ParameterError) as err:
        cache.crop_rows([28, 26], 28)  # the query at 26 needs 23 .. 26: 23 is gone
    assert str(err.value) == (
        "WindowCache.crop_rows: ends[1]=26 is invalid: the window has evicted tokens row 1's query at slot 26 would "
        "need (slack=3); allowed: 27 <= ends[1] <= 30, or ends[1] <= 0 (the row keeps none of its tokens)"
    )
    with pytest.raises(dk.ParameterError) as err:
        cache.crop_rows([28, 27], 26)
    assert str(err.value) == (
        "WindowCache.crop_rows: ends=[28, 27], length=26 are invalid: row 0 keeps its 28 tokens (slots 0..27), more "
        "than 26 slots hold; allowed: length >= 28"
    )
    cache.crop_rows([28, 27], 28)
    assert cache.length == 28
    out = _feed_rows(cache, [28, 27], 5, [1, 2])
    torch.testing.assert_close(out[0], alone(1, 28, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], alone(2, 27, 5), atol=1e-5, rtol=0)
    cache.crop_rows([33, 0], 33)  # row 1 keeps nothing: fed afresh from position 0
    out = _feed_rows(cache, [33, 0], 9, [1, 3])
    torch.testing.assert_close(out[1], alone(3, 0, 9), atol=1e-5, rtol=0)

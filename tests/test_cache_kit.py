"""The cache kit can fail: each check catches the fault it is about, and names layer, step and shape."""

from __future__ import annotations

import sys

import pytest
import torch
from decodekit_cache_gqa.cache import GQACache
from decodekit_cache_window.cache import WindowCache
from decodekit_cache_window.params import WindowParams
from torch import Tensor

import decodekit as dk
from decodekit.testing import CacheConformance


class DropsOldest(GQACache):
    """Claims to keep everything but forgets slot 0 once 8 tokens are in."""

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = super().update(layer, k, v)
        if keys.shape[2] > 8:
            keys = torch.cat([keys[:, :, 1:2], keys[:, :, 1:]], 2)
        return keys, values


class LiesAboutBytes(GQACache):
    @property
    def nbytes(self) -> int:
        return super().nbytes + 1


class CropDoesNothing(GQACache):
    def crop(self, n: int) -> None:
        pass


class ReorderDoesNothing(GQACache):
    def reorder(self, index: Tensor) -> None:
        pass


class StatesTooLittle(GQACache):
    """States one slot less than it takes."""

    @property
    def capacity(self) -> int:
        return self.spec.capacity - 1


class StatesUnbounded(GQACache):
    """States it never refuses, yet keeps every token in its `spec.capacity` slots (as `prefill_only` once did)."""

    capacity = sys.maxsize


class SinksNotMoved(WindowCache):
    """A window that leaves the sinks at their own positions (what mlx-lm's rotating cache does)."""

    def _move_sinks(self, layer: int, start: int, T: int, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:  # noqa: N803
        self._owners[layer] = None
        return keys, values


def suite(factory: type, window: bool = False) -> CacheConformance:
    class Suite(CacheConformance):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            return factory(spec, WindowParams(size=4, sinks=2, slack=3)) if window else factory(spec)

        if window:

            def kept(self, spec: dk.CacheSpec, layer: int, query: int, first: int) -> dict[int, int]:
                seen = {t: t + max(0, query - 5) for t in range(min(2, query + 1))}
                seen.update({t: t for t in range(max(0, query - 3), query + 1)})
                return seen

            def rollback(self, spec: dk.CacheSpec) -> int | None:
                return 3

            def nbytes(self, spec: dk.CacheSpec) -> int:
                return WindowCache(spec, WindowParams(size=4, sinks=2, slack=3)).nbytes

    return Suite()


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    [
        (
            DropsOldest,
            "test_attention_matches_reference",
            r"4 kv-heads, torch.float32: step 3, layer 0, slots 8\.\.10, returned keys \(2, 4, 11, 8\), row 0",
        ),
        (DropsOldest, "test_keeps_all_returns_every_token", r"step 3, layer 0, slots 8\.\.10"),
        (LiesAboutBytes, "test_nbytes_exact", "nbytes .* != the formula"),
        (CropDoesNothing, "test_crop", r"crop\(\d+\): length"),
        (ReorderDoesNothing, "test_reorder", r"after reorder\(\[1, 0\]\).*attention differs"),
        (StatesTooLittle, "test_capacity_or_eviction", r"40 tokens after 0 were taken, past the stated capacity 39"),
        (StatesUnbounded, "test_capacity_or_eviction", r"stated capacity \d+, yet 1 tokens after 40 refused"),
    ],
)
def test_each_check_catches_its_fault(factory: type, check: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        getattr(suite(factory), check)()


def test_a_window_whose_sinks_sit_at_untrained_distances_fails_the_reference() -> None:
    with pytest.raises(AssertionError, match="layer 0.*attention differs from the reference"):
        suite(SinksNotMoved, window=True).test_attention_matches_reference()
    suite(WindowCache, window=True).test_attention_matches_reference()  # the real one passes

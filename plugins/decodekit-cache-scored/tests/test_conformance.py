"""Every scored cache through the kit for scored caches: gqa, int8 and dense storage."""

from __future__ import annotations

import pytest
import torch
from decodekit_cache_int8.storage import dequantise, quantise

import decodekit as dk
from decodekit.testing.scored_caches import ScoredCacheConformance

BUDGET, SINKS, RECENT, SLACK = 5, 1, 1, 3


class H2OSuite(ScoredCacheConformance):
    cache = "h2o"
    store = "gqa"
    budget, sinks, recent, rollback, slack = BUDGET, SINKS, RECENT, SLACK, SLACK

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return dk.create_cache(
            self.cache, spec, budget=BUDGET, sinks=SINKS, recent=RECENT, slack=SLACK, store=self.store
        )

    def nbytes(self, spec: dk.CacheSpec) -> int:
        slots = spec.n_layers * (BUDGET + 4 * SLACK)
        item = torch.empty((), dtype=spec.dtype).element_size()
        return 2 * spec.batch_size * slots * spec.n_kv_heads * spec.head_dim * item


class Int8Suite(H2OSuite):
    store = "int8"

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        return dequantise(*quantise(x), x.dtype)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return 2 * spec.batch_size * spec.n_layers * (BUDGET + 4 * SLACK) * spec.n_kv_heads * (spec.head_dim + 4)


class TestH2O(H2OSuite):
    pass


class TestH2OInt8(Int8Suite):
    pass


class TestTOVA(H2OSuite):
    cache = "tova"


class TestTOVAInt8(Int8Suite):
    cache = "tova"


class TestKeyNorm(H2OSuite):
    cache = "knorm"


class TestKeyNormInt8(Int8Suite):
    cache = "knorm"


class TestStreaming(H2OSuite):
    cache = "streaming"


class TestSnapKV(H2OSuite):
    cache = "snapkv"

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return dk.create_cache(
            "snapkv", spec, budget=BUDGET, sinks=SINKS, recent=RECENT, slack=SLACK, window=4, kernel=3, store=self.store
        )


class TestSnapKVInt8(Int8Suite, TestSnapKV):
    pass


class TestH2ODense(H2OSuite):
    """Over a storage that repeats each kv-head for its query heads."""

    store = "dense"

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return super().nbytes(spec) * spec.n_heads // spec.n_kv_heads


@pytest.mark.parametrize("cache", ["h2o", "tova", "knorm", "streaming", "snapkv"])
def test_registered_and_listed(cache: str) -> None:
    assert cache in dk.get_registry().caches

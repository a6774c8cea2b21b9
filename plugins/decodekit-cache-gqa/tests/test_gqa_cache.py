from __future__ import annotations

import pytest
import torch
from decodekit_cache_gqa.cache import GQACache

import decodekit as dk
from decodekit.testing import CacheConformance


class TestGQAConformance(CacheConformance):
    def make(self, spec: dk.CacheSpec) -> GQACache:
        return GQACache(spec)

    def stored_heads(self, spec: dk.CacheSpec) -> int:
        return spec.n_kv_heads


def spec(n_heads: int, n_kv_heads: int, dtype: torch.dtype = torch.float16) -> dk.CacheSpec:
    return dk.CacheSpec(
        n_layers=12, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=64, batch_size=2, capacity=100, dtype=dtype
    )


def test_registered_through_entry_point() -> None:
    assert isinstance(dk.create_cache("gqa", spec(12, 4)), GQACache)
    assert dk.get_registry().caches["gqa"].distribution == "decodekit-cache-gqa"


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(12, 12), (12, 4), (12, 1), (8, 2)])
def test_gqa_is_n_heads_over_n_kv_heads_smaller_than_dense(n_heads: int, n_kv_heads: int) -> None:
    dense = dk.create_cache("dense", spec(n_heads, n_kv_heads)).nbytes  # type: ignore[attr-defined]  # nbytes: not in KVCache
    gqa = dk.create_cache("gqa", spec(n_heads, n_kv_heads)).nbytes  # type: ignore[attr-defined]  # nbytes: not in KVCache
    assert dense == gqa * (n_heads // n_kv_heads)
    # 2 · L · B · T · n_kv_heads · head_dim · bytes
    assert gqa == 2 * 12 * 2 * 100 * n_kv_heads * 64 * 2


def test_append_writes_in_place_at_any_position() -> None:
    s = dk.CacheSpec(n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=2100)
    cache = GQACache(s)
    buf = cache.store.keys[0]  # type: ignore[attr-defined]
    ptr = buf.data_ptr()
    cache.update(0, torch.zeros(1, 2, 2000, 8), torch.zeros(1, 2, 2000, 8))
    k = torch.ones(1, 2, 1, 8)
    k_all, _ = cache.update(0, k, k)
    assert cache.store.keys[0].data_ptr() == ptr  # type: ignore[attr-defined]  # no reallocation, no torch.cat of the past
    assert k_all.shape == (1, 2, 2001, 8) and torch.equal(k_all[:, :, 2000:], k)

from __future__ import annotations

import torch
from decodekit_cache_dense.cache import DenseCache

import decodekit as dk
from decodekit.testing import CacheConformance


class TestDenseConformance(CacheConformance):
    def make(self, spec: dk.CacheSpec) -> DenseCache:
        return DenseCache(spec)

    def stored_heads(self, spec: dk.CacheSpec) -> int:
        return spec.n_heads


def gpt2_small(capacity: int, n_kv_heads: int = 12) -> dk.CacheSpec:
    return dk.CacheSpec(
        n_layers=12,
        n_heads=12,
        n_kv_heads=n_kv_heads,
        head_dim=64,
        batch_size=1,
        capacity=capacity,
        dtype=torch.float16,
    )


def test_registered_through_entry_point() -> None:
    cache = dk.create_cache("dense", gpt2_small(8))
    assert isinstance(cache, DenseCache)
    assert dk.get_registry().caches["dense"].distribution == "decodekit-cache-dense"


def test_gpt2_small_fp16_bytes_per_token() -> None:
    # 2 (k and v) * 12 layers * 12 heads * 64 dims * 2 bytes = 36,864 bytes per token
    cache = dk.create_cache("dense", gpt2_small(1024))
    assert cache.nbytes - dk.create_cache("dense", gpt2_small(1023)).nbytes == 36_864  # type: ignore[attr-defined]  # one more token of one row
    assert cache.nbytes == 36_864 * 1024 == 37_748_736  # type: ignore[attr-defined]  # the notes' 37.7 MB for 1,024 tokens


def test_dense_stores_every_head_on_a_gqa_model() -> None:
    # 4 kv-heads repeated to 12 heads: the dense cache pays for all 12
    assert dk.create_cache("dense", gpt2_small(16, n_kv_heads=4)).nbytes == 36_864 * 16  # type: ignore[attr-defined]  # nbytes: not in KVCache


def test_dense_repeats_kv_heads_in_query_head_order() -> None:
    spec = dk.CacheSpec(n_layers=1, n_heads=4, n_kv_heads=2, head_dim=3, batch_size=1, capacity=4)
    cache = DenseCache(spec)
    k = torch.arange(2 * 3, dtype=torch.float32).view(1, 2, 1, 3)
    k_all, _ = cache.update(0, k, k)
    # query heads 0,1 read kv-head 0; heads 2,3 read kv-head 1 (as enable_gqa does)
    assert torch.equal(k_all[0, :, 0], torch.stack([k[0, 0, 0], k[0, 0, 0], k[0, 1, 0], k[0, 1, 0]]))

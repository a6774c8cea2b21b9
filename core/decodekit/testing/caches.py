"""Conformance checks for KV-cache backends: equals recomputation, exact bytes, in-place writes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from decodekit.cache import KVCache
from decodekit.errors import CacheCapacityError
from decodekit.spec import CacheSpec

__all__ = ["CacheConformance", "check_cache"]

CacheFactory = Callable[[CacheSpec], KVCache]


def _spec(n_heads: int, n_kv_heads: int, capacity: int = 24, batch: int = 2) -> CacheSpec:
    return CacheSpec(
        n_layers=2, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=8, batch_size=batch, capacity=capacity
    )


def _expand(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Repeat kv-heads `[B, H_kv, T, D]` to `heads` query heads."""
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def check_cache(factory: CacheFactory, *, stored_heads: Callable[[CacheSpec], int]) -> None:
    """Run every cache check on `factory`; `stored_heads(spec)` is the head count it should keep.

    - what `update` returns equals the concatenation of everything written (recomputation),
      up to repeating kv-heads to query heads;
    - `length`, `crop`, `reorder`, `reset` behave, and a write past capacity raises;
    - `nbytes` equals 2 · layers · batch · capacity · stored heads · head_dim · element size;
    - appends write in place (the returned keys of a later step share storage with earlier ones).
    """
    g = torch.Generator().manual_seed(0)
    for n_heads, n_kv in ((4, 4), (4, 2), (4, 1)):
        for dtype in (torch.float32, torch.float16):
            spec = CacheSpec(
                n_layers=2, n_heads=n_heads, n_kv_heads=n_kv, head_dim=8, batch_size=2, capacity=24, dtype=dtype
            )
            cache = factory(spec)
            heads = stored_heads(spec)
            expected = 2 * spec.n_layers * spec.batch_size * spec.capacity * heads * spec.head_dim
            expected *= torch.empty((), dtype=dtype).element_size()
            assert cache.nbytes == expected, f"nbytes {cache.nbytes} != formula {expected} for {spec}"
            assert cache.length == 0 and cache.capacity == spec.capacity
            written_k: list[list[torch.Tensor]] = [[], []]
            written_v: list[list[torch.Tensor]] = [[], []]
            first_ptr = None
            for t_new in (5, 1, 1, 3):
                for layer in range(spec.n_layers):
                    k = torch.randn(2, n_kv, t_new, 8, generator=g).to(dtype)
                    v = torch.randn(2, n_kv, t_new, 8, generator=g).to(dtype)
                    written_k[layer].append(k)
                    written_v[layer].append(v)
                    k_all, v_all = cache.update(layer, k, v)
                    ref_k = torch.cat(written_k[layer], dim=2)
                    ref_v = torch.cat(written_v[layer], dim=2)
                    assert k_all.shape[1] == heads, f"returned {k_all.shape[1]} heads, expected {heads}"
                    assert torch.equal(_expand(k_all, n_heads), _expand(ref_k, n_heads)), "keys != recomputation"
                    assert torch.equal(_expand(v_all, n_heads), _expand(ref_v, n_heads)), "values != recomputation"
                    if layer == 0:
                        ptr = k_all.untyped_storage().data_ptr()
                        first_ptr = ptr if first_ptr is None else first_ptr
                        assert ptr == first_ptr, "update reallocated the key buffer (must write in place)"
            assert cache.length == 10, f"length {cache.length} after writing 10 tokens"
            assert cache.nbytes == expected, "nbytes changed while writing"
            # reorder: swap the two rows
            before = cache.update(0, torch.zeros(2, n_kv, 0, 8, dtype=dtype), torch.zeros(2, n_kv, 0, 8, dtype=dtype))
            k_before = before[0].clone()
            cache.reorder(torch.tensor([1, 0]))
            after = cache.update(0, torch.zeros(2, n_kv, 0, 8, dtype=dtype), torch.zeros(2, n_kv, 0, 8, dtype=dtype))
            assert torch.equal(after[0], k_before.flip(0)), "reorder did not permute rows"
            # crop: keep 4 tokens, the next write lands at position 4
            cache.crop(4)
            assert cache.length == 4
            k = torch.randn(2, n_kv, 1, 8, generator=g).to(dtype)
            k_all, _ = cache.update(0, k, k)
            assert k_all.shape[2] == 5 and torch.equal(_expand(k_all[:, :, 4:], n_heads), _expand(k, n_heads))
            cache.reset()
            assert cache.length == 0
            # capacity
            big = torch.zeros(2, n_kv, spec.capacity + 1, 8, dtype=dtype)
            try:
                cache.update(0, big, big)
            except CacheCapacityError as exc:
                assert str(spec.capacity) in str(exc), "capacity error must name the capacity"
            else:
                raise AssertionError("writing past capacity did not raise CacheCapacityError")


class CacheConformance:
    """pytest suite: subclass, implement `make(spec)` and `stored_heads(spec)`."""

    def make(self, spec: CacheSpec) -> KVCache:
        raise NotImplementedError

    def stored_heads(self, spec: CacheSpec) -> int:
        raise NotImplementedError

    def test_conformance(self) -> None:
        check_cache(self.make, stored_heads=self.stored_heads)

    def test_protocol(self) -> None:
        assert isinstance(self.make(_spec(4, 2)), KVCache)

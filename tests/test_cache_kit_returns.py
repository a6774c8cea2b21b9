"""The cache kits fail a cache whose methods return the wrong kind of thing with an AssertionError naming the method
and what is allowed, not a TypeError deep inside the kit (or, worse, a misleading "attention differs")."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from decodekit_cache_gqa.cache import GQACache
from decodekit_cache_scored.caches import TOVACache
from decodekit_cache_scored.params import ScoredParams
from decodekit_cache_window.cache import WindowCache
from test_cache_kit import suite
from torch import Tensor

import decodekit as dk
from decodekit.testing.scored_caches import ScoredCacheConformance


class AdditiveMask(GQACache):
    """A float mask, 0 where a query may attend and -inf elsewhere (what SDPA also takes)."""

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        allowed = super().attention_mask(layer, positions)
        return torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))


class MaskOneKeyShort(GQACache):
    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        return super().attention_mask(layer, positions)[..., :-1]


class PerHeadMask(GQACache):
    """A mask per query head, `[B, n_heads, T, S]`: the protocol allows it."""

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        return super().attention_mask(layer, positions).expand(-1, self.spec.n_heads, -1, -1)


class UpdateReturnsKeysOnly(GQACache):
    def update(self, layer: int, k: Tensor, v: Tensor) -> Any:
        return super().update(layer, k, v)[0]


class ValuesInFloat64(GQACache):
    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = super().update(layer, k, v)
        return keys, values.double()


class KeysOneDimShort(GQACache):
    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = super().update(layer, k, v)
        return keys[..., :-1], values


class LengthAMethod(GQACache):
    def length(self) -> int:  # type: ignore[override]  # the fault: a method, not a property
        return self._lengths[-1]


class RollbackAMethod(GQACache):
    def rollback(self) -> int:  # type: ignore[override]
        return sys.maxsize


class NbytesAMethod(GQACache):
    def nbytes(self) -> int:  # type: ignore[override]
        return self.store.nbytes


class CapacityAMethod(GQACache):
    def capacity(self) -> int:  # type: ignore[override]
        return self.spec.capacity


class ReorderReturnsACopy(GQACache):
    """Reorders a copy and returns it, leaving itself as it was."""

    def reorder(self, index: Tensor) -> Any:
        other = GQACache(self.spec)
        other.store.keys = [k.clone() for k in self.store.keys]  # type: ignore[attr-defined]  # a FloatStorage
        other.store.values = [v.clone() for v in self.store.values]  # type: ignore[attr-defined]
        other._lengths = list(self._lengths)
        GQACache.reorder(other, index)
        return other


class CropRowsReturnsTheLength(GQACache):
    def crop_rows(self, ends: Sequence[int], length: int) -> Any:
        return length


class ReachForgetsToReturn(WindowCache):
    def reach(self, new: int) -> Any:
        super().reach(new)


class ScoredAdditiveMask(TOVACache):
    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        allowed = super().attention_mask(layer, positions)
        return torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))


class ScoredValuesInFloat64(TOVACache):
    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = super().update(layer, k, v)
        return keys, values.double()


class ScoredNbytesAMethod(TOVACache):
    def nbytes(self) -> int:  # type: ignore[override]
        return 0


PARAMS = ScoredParams(budget=5, sinks=1, recent=1, slack=3)


def scored(factory: type) -> ScoredCacheConformance:
    class Suite(ScoredCacheConformance):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            return factory(spec, PARAMS)  # type: ignore[no-any-return]

        def nbytes(self, spec: dk.CacheSpec) -> int:
            return TOVACache(spec, PARAMS).nbytes

    return Suite()


def kit(factory: type[dk.KVCache]) -> Any:
    """The kit for `factory`: the scored one for a scored cache, else `CacheConformance` (a window's stated)."""
    return scored(factory) if issubclass(factory, TOVACache) else suite(factory, issubclass(factory, WindowCache))


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    [
        (
            AdditiveMask,
            "test_attention_matches_reference",
            r"layer 0, slots 0\.\.5: attention_mask returned a torch\.float32 tensor \(2, 1, 6, 6\); allowed: a "
            r"bool tensor \[B, 1 or H, T, S\] = \(2, 1 or 4, 6, 6\), True where a query may attend "
            r"\(an additive float mask: return mask == 0\)",
        ),
        (
            MaskOneKeyShort,
            "test_attention_matches_reference",
            r"attention_mask returned a torch\.bool tensor \(2, 1, 6, 5",
        ),
        (
            UpdateReturnsKeysOnly,
            "test_attention_matches_reference",
            r"slots 0\.\.5: update returned a torch\.float32 tensor \(2, 4, 6, 8\); allowed: \(keys, values\), "
            r"\[B, H_stored, S, D\] = \(2, H_stored, S, 8\) and \[\.\., 8\], in torch\.float32",
        ),
        (ValuesInFloat64, "test_attention_matches_reference", r"update returned values of dtype torch\.float64"),
        (KeysOneDimShort, "test_attention_matches_reference", r"update returned keys \(2, 4, 6, 7\) and values"),
        (LengthAMethod, "test_attention_matches_reference", r"cache\.length is a method; allowed: an int property"),
        (LengthAMethod, "test_capacity_or_eviction", r"cache\.length is a method; allowed: an int property"),
        (LengthAMethod, "test_protocol", r"cache\.length is a method; allowed: an int property"),
        (RollbackAMethod, "test_protocol", r"cache\.rollback is a method; allowed: an int property"),
        (NbytesAMethod, "test_nbytes_exact", r"cache\.nbytes is a method; allowed: an int property"),
        (CapacityAMethod, "test_capacity_or_eviction", r"cache\.capacity is a method; allowed: an int property"),
        (ReorderReturnsACopy, "test_reorder", r"reorder\(\[1, 0\]\) returned a GQACache; allowed: None"),
        (CropRowsReturnsTheLength, "test_crop_rows", r"crop_rows\(\[23, 25\], 25\) returned an int; allowed: None"),
        (ReachForgetsToReturn, "test_reach", r"step 0: cache\.reach\(6\) returned None; allowed: an int"),
        (ScoredAdditiveMask, "test_attention_over_the_kept_entries", r"slots 0\.\.2: attention_mask returned a torch"),
        (ScoredValuesInFloat64, "test_attention_over_the_kept_entries", r"update returned values of dtype"),
        (ScoredNbytesAMethod, "test_nbytes_fixed", r"cache\.nbytes is a method; allowed: an int property"),
    ],
)
def test_a_wrong_return_fails_naming_the_method(factory: type, check: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        getattr(kit(factory), check)()


def test_a_mask_per_query_head_passes() -> None:
    suite(PerHeadMask).test_attention_matches_reference()


def test_a_window_cache_passes_the_reach_check() -> None:
    """The check of what `reach` returns passes a real one."""
    suite(WindowCache, window=True).test_reach()

"""A capability is a member of the cache's class: decodekit reads it from the class, creating no cache (a
capability error's list of installed backends, `evicts(impl)`), so the kits fail a cache that sets one on the
instance only, naming it."""

from __future__ import annotations

import pytest
from decodekit_cache_gqa.cache import GQACache
from decodekit_cache_scored.caches import H2OCache
from decodekit_cache_scored.params import ScoredParams
from torch import Tensor

import decodekit as dk
from decodekit.testing import CacheConformance
from decodekit.testing.scored_caches import ScoredCacheConformance

PARAMS = ScoredParams(budget=5, sinks=1, recent=1, slack=3)


class ReorderOnInstance:
    """A gqa cache behind a class without `reorder`, which each instance sets on itself."""

    def __init__(self, spec: dk.CacheSpec) -> None:
        self.spec, self._inner = spec, GQACache(spec)
        self.reorder = self._inner.reorder

    @property
    def length(self) -> int:
        return self._inner.length

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self._inner.update(layer, k, v)

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        return self._inner.attention_mask(layer, positions)


class CropRowsOnInstance(H2OCache):
    def __init__(self, spec: dk.CacheSpec, params: ScoredParams | None = None) -> None:
        super().__init__(spec, params)
        self.crop_rows = lambda ends, length: None


class Kit(CacheConformance):
    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return ReorderOnInstance(spec)


class ScoredKit(ScoredCacheConformance):
    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return CropRowsOnInstance(spec, PARAMS)


@pytest.mark.parametrize(
    ("kit", "member", "protocol"),
    [(Kit, "ReorderOnInstance.reorder", "Reorderable"), (ScoredKit, "CropRowsOnInstance.crop_rows", "RowCroppable")],
)
def test_a_capability_set_on_the_instance_only_fails_the_kit(kit: type, member: str, protocol: str) -> None:
    with pytest.raises(
        AssertionError,
        match=rf"^{member} is set on the instance only; allowed: a member of the class "
        rf"\(a method or property: decodekit reads {protocol} from the class, creating no cache\)$",
    ):
        kit().test_protocol()


def test_a_capability_of_the_class_passes() -> None:
    class Honest(CacheConformance):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            return GQACache(spec)

    class HonestScored(ScoredCacheConformance):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            return H2OCache(spec, PARAMS)

    Honest().test_protocol()
    HonestScored().test_protocol()

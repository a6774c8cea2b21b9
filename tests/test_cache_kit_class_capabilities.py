"""A capability is a member of the cache's class: decodekit reads it from the class, creating no cache (a
capability error's list of installed backends, `evicts(impl)`), so the kits fail a cache that sets one on the
instance only, naming it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from decodekit_cache_gqa.cache import GQACache
from decodekit_cache_scored.caches import H2OCache
from decodekit_cache_scored.params import ScoredParams
from test_capability_words import Lru

import decodekit as dk
from decodekit.testing import CacheConformance
from decodekit.testing.scored_caches import ScoredCacheConformance

PARAMS = ScoredParams(budget=5, sinks=1, recent=1, slack=3)


class ReorderOnInstance(Lru):
    """A cache whose class has no `reorder`, which each instance sets on itself."""

    def __init__(self, spec: dk.CacheSpec) -> None:
        super().__init__(spec)
        self.reorder = self._inner.reorder


class CropRowsOnInstance:
    """An h2o's `crop_rows` set on an instance whose class has none (the scored caches' classes have it)."""

    def __init__(self, spec: dk.CacheSpec) -> None:
        self.spec = spec
        self.crop_rows = H2OCache(spec, PARAMS).crop_rows


def kit(base: type, make: Callable[[dk.CacheSpec], dk.KVCache]) -> CacheConformance | ScoredCacheConformance:
    suite = type("Suite", (base,), {"make": lambda self, spec: make(spec)})
    return suite()  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("base", "make", "said"),
    [
        (CacheConformance, ReorderOnInstance, "ReorderOnInstance.reorder is set on the instance only"),
        (ScoredCacheConformance, CropRowsOnInstance, "CropRowsOnInstance.crop_rows is set on the instance only"),
    ],
)
def test_a_capability_set_on_the_instance_only_fails_the_kit(base: type, make: type, said: str) -> None:
    protocol = "Reorderable" if make is ReorderOnInstance else "RowCroppable"
    with pytest.raises(AssertionError) as info:
        kit(base, make).test_protocol()
    assert str(info.value).splitlines()[0] == (
        f"{said}; allowed: a member of the class (a method or property: decodekit reads {protocol} from the class, "
        "creating no cache)"
    )


def test_a_capability_of_the_class_passes() -> None:
    kit(CacheConformance, GQACache).test_protocol()
    kit(ScoredCacheConformance, lambda spec: H2OCache(spec, PARAMS)).test_protocol()

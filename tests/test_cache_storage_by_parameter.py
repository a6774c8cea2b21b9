"""A storage that depends on a backend's parameter (docs/plugins.md): a `PreallocatedKVCache` subclass sets
`self.storage` before `super().__init__()`, which builds that one; its class's `storage` stays the default, so the
backend is still a `store=` of the eviction policies. Until 2026-12-06 `__init__` built the class's storage
whatever the instance set, and docs/plugins.md had a function pick a class instead, which is no `store=` at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
import torch
from decodekit_cache_int8.storage import Int8Storage, dequantise, quantise

import decodekit as dk
from decodekit import hookimpl
from decodekit.cache import PreallocatedKVCache
from decodekit.hookspecs import Registrar
from decodekit.storage import FloatStorage, StorageFactory


class LowpParams(dk.Params):
    dtype: Literal["float32", "int8"] = "float32"


class LowpCache(PreallocatedKVCache):
    storage: StorageFactory = FloatStorage  # the default, and what store="lowp" names

    def __init__(self, spec: dk.CacheSpec, params: LowpParams | None = None) -> None:
        if params is not None and params.dtype == "int8":
            self.storage = Int8Storage  # before super().__init__(), which builds it
        super().__init__(spec, params)


class Lowp:
    @hookimpl
    def register_cache_backends(self, register: Registrar) -> None:
        register("lowp", LowpCache, LowpParams, "Every token in float32 or int8")


@pytest.fixture
def lowp() -> Iterator[None]:
    plugin = Lowp()
    dk.register_plugin(plugin, name="test-lowp")
    try:
        yield
    finally:
        dk.unregister_plugin(plugin)


SPEC = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4, batch_size=1, capacity=8)


@pytest.mark.usefixtures("lowp")
def test_the_parameter_picks_the_storage() -> None:
    k = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(0))
    for given, stored in [("lowp", k), ("lowp(dtype='int8')", dequantise(*quantise(k), k.dtype))]:
        cache = dk.create_cache(given, SPEC)
        keys, _ = cache.update(0, k, k)
        assert torch.equal(keys, stored), given  # int8: what its own round trip gives, not the float keys
    assert isinstance(cache, dk.cache.Sized) and cache.nbytes == 2 * 2 * 8 * (4 + 4)  # int8 codes + a float32 scale


@pytest.mark.usefixtures("lowp")
def test_the_class_default_is_still_a_store() -> None:
    window = dk.create_cache("window(size=4, sinks=0, store='lowp')", SPEC)
    assert isinstance(window, dk.cache.Sized)
    assert window.nbytes > 0

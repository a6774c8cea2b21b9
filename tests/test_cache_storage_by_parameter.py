"""A storage that depends on a backend's parameter (docs/plugins.md): a `PreallocatedKVCache` subclass sets
`self.storage` before `super().__init__()`, which builds that one; its class's `storage` stays the default, so the
backend is still a `store=` of the eviction policies. Until 2026-12-06 `__init__` built the class's storage
whatever the instance set, and docs/plugins.md had a function pick a class instead, which is no `store=` at all."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

import pytest
import torch
from torch import Tensor

import decodekit as dk
from decodekit import hookimpl
from decodekit.cache import PreallocatedKVCache
from decodekit.hookspecs import Registrar
from decodekit.storage import FloatStorage


class HalfStorage(FloatStorage):
    """Keys and values in float16, handed out in the cache's dtype."""

    def __init__(self, spec: dk.CacheSpec, slots: Sequence[int]) -> None:
        super().__init__(dk.CacheSpec(**{**spec.__dict__, "dtype": torch.float16}), slots)
        self.out_dtype = spec.dtype

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        k, v = super().read(layer, start, stop)
        return k.to(self.out_dtype), v.to(self.out_dtype)


class LowpParams(dk.Params):
    dtype: Literal["float32", "float16"] = "float32"


class LowpCache(PreallocatedKVCache):
    storage = FloatStorage  # the default, and what store="lowp" names

    def __init__(self, spec: dk.CacheSpec, params: LowpParams | None = None) -> None:
        if params is not None and params.dtype == "float16":
            self.storage = HalfStorage  # before super().__init__(), which builds it
        super().__init__(spec, params)


class Lowp:
    @hookimpl
    def register_cache_backends(self, register: Registrar) -> None:
        register("lowp", LowpCache, LowpParams, "Every token in float32 or float16")


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
@pytest.mark.parametrize(("given", "stored"), [("lowp", torch.float32), ("lowp(dtype='float16')", torch.float16)])
def test_the_parameter_picks_the_storage(given: str, stored: torch.dtype) -> None:
    cache = dk.create_cache(given, SPEC)
    assert isinstance(cache, dk.cache.Sized)
    k = torch.full((1, 2, 1, 4), 1 / 3)
    keys, _ = cache.update(0, k, k)
    assert keys.dtype == torch.float32 and keys[0, 0, 0, 0].item() == k.to(stored).float()[0, 0, 0, 0].item()
    assert cache.nbytes == 2 * 2 * 8 * 4 * torch.empty((), dtype=stored).element_size()


@pytest.mark.usefixtures("lowp")
def test_the_class_default_is_still_a_store() -> None:
    window = dk.create_cache("window(size=4, sinks=0, store='lowp')", SPEC)
    assert isinstance(window, dk.cache.Sized)
    assert window.nbytes > 0

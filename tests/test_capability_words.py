"""A cache refused for a capability it lacks is named as the user typed it (`--cache lru`, not its class `Lru`), and
the refusal lists the installed backends that offer the capability, so the user can choose one."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from decodekit_cache_gqa.cache import GQACache
from torch import Tensor

import decodekit as dk
from decodekit.cache import _CAPABILITIES, capability_error
from decodekit.plugins import get_registry
from tinymodels import tiny_gpt


class Lru:
    """A plugin author's cache that keeps every token (a GQACache inside) and offers no capability."""

    def __init__(self, spec: dk.CacheSpec, params: object = None) -> None:
        self.spec, self._inner = spec, GQACache(spec)

    @property
    def length(self) -> int:
        return self._inner.length

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self._inner.update(layer, k, v)

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        return self._inner.attention_mask(layer, positions)


class LruPlugin:
    @dk.hookimpl
    def register_cache_backends(self, register: dk.hookspecs.Registrar) -> None:
        register("lru", Lru, description="test-only: a cache without crop or reorder")


@pytest.fixture
def lru_registered() -> Iterator[None]:
    plugin = LruPlugin()
    dk.register_plugin(plugin, name="test-lru")
    yield
    dk.unregister_plugin(plugin)


SPEC = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=16, max_positions=64)
MADE = {"window": "window(size=4)"}  # its default size reads a calibration this spec has none of


def offering(need: str) -> str:
    """The installed backends whose caches, created, have `need` (the refusal reads their classes instead)."""
    protocol = _CAPABILITIES[need][0]
    names = sorted(n for n in get_registry().caches if isinstance(dk.create_cache(MADE.get(n, n), SPEC), protocol))
    return ", ".join(names)


@pytest.mark.usefixtures("lru_registered")
def test_a_strategy_refuses_a_cache_by_the_name_the_user_typed() -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.decode(tiny_gpt(), [[1, 2, 3]], strategy="beam(num_beams=2)", cache="lru", max_new_tokens=2)
    assert str(info.value) == (
        "beam: cache lru cannot be used: beam needs a cache that moves its rows after the beams with reorder(index); "
        f"allowed: a cache backend with reorder (installed: {offering('reorder')})"
    )


@pytest.mark.parametrize("need", sorted(_CAPABILITIES))
def test_the_refusal_lists_the_installed_backends_that_offer_the_capability(need: str) -> None:
    error = capability_error(object(), need, "speculative")
    assert error is not None
    assert re.fullmatch(
        rf"speculative: cache object cannot be used: .*; allowed: a cache backend with {need} "
        rf"\(installed: {re.escape(offering(need))}\)",
        str(error),
    )


def test_a_cache_no_plugin_registers_is_named_by_its_class() -> None:
    error = capability_error(Lru(SPEC), "crop", "speculative")
    assert error is not None and str(error).startswith("speculative: cache Lru cannot be used: speculative needs")


@pytest.mark.usefixtures("lru_registered")
def test_a_registered_cache_is_named_by_its_registered_name() -> None:
    error = capability_error(dk.create_cache("lru", SPEC), "crop_rows", "speculative")
    assert error is not None and str(error).startswith("speculative: cache lru cannot be used:")
    h2o = dk.create_cache("h2o(budget=16)", SPEC)  # a scored cache: crop, and crop_rows too (every backend has both)
    assert capability_error(h2o, "crop", "speculative") is None and capability_error(h2o, "crop_rows", "s") is None

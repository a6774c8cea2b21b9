"""Every refusal of a cache's parameters starts with "cache NAME: " and names the parameter, its value and what is
allowed, as pydantic's refusals through `validate_params` do (`store=` had no prefix, `window: size=` another)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import decodekit as dk
from decodekit.plugins import get_registry

SPEC = dk.CacheSpec(
    n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=16, max_positions=64, rope_base=1e4
)
LONG_TEXT = replace(SPEC, capacity=65)  # a text that can pass the context: a window wider than it is refused
NO_CONTEXT = dk.CacheSpec(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, batch_size=1, capacity=16)


def storages() -> str:
    """The installed backends `window(store=NAME)` works over, found by trying each (the refusal reads classes)."""

    def works(name: str) -> bool:
        try:
            dk.create_cache(f"window(size=4, store={name!r})", SPEC)
        except dk.ParameterError:
            return False
        return True

    return ", ".join(sorted(n for n in get_registry().caches if works(n)))


@pytest.mark.parametrize("cache", ["window(size=4, store='nope')", "h2o(budget=12, store='nope')"])
def test_an_unknown_store_names_the_cache_and_the_installed_storages(cache: str) -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.create_cache(cache, SPEC)
    name = cache.split("(")[0]
    assert str(info.value) == f"cache {name}: store='nope' is invalid; allowed: a storage backend ({storages()})"


def test_a_store_without_storage_says_so_and_lists_those_with_one() -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.create_cache("window(size=4, store='tova')", SPEC)
    assert str(info.value) == (
        "cache window: store='tova' is invalid: cache backend 'tova' keeps no storage of its own (no `storage` "
        f"attribute); allowed: a storage backend ({storages()})"
    )


@pytest.mark.parametrize(
    ("cache", "spec", "said"),
    [
        ("window(size=100)", LONG_TEXT, "size=100 (layer 0) + sinks=4 is invalid"),
        ("window(size=[4])", SPEC, "size=[4] is invalid; allowed: one size per layer (2 layers)"),
        ("window(size=[4, 0])", SPEC, "size=[4, 0] is invalid at layer 1; allowed: sizes >= 1"),
        ("window(size='auto')", SPEC, "size='auto' is invalid for this model"),
        ("window(size=4, slack=100000000000)", SPEC, "size=4, sinks=4, slack=100000000000 is invalid: the cache"),
        ("h2o", NO_CONTEXT, "compression=0.5 (the default) is invalid for this model"),
        ("h2o(compression=0.99)", SPEC, "compression=0.99 keeps 1 of 64 entries"),
        ("tova(budget=100000000000)", NO_CONTEXT, "budget=100000000000, slack=8 is invalid: the cache would allocate"),
        ("snapkv(budget=12, store='nope')", SPEC, "store='nope' is invalid"),
    ],
)
def test_each_cache_parameter_refusal_starts_with_the_cache(cache: str, spec: dk.CacheSpec, said: str) -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.create_cache(cache, spec)
    message = str(info.value)
    assert message.startswith(f"cache {cache.split('(')[0]}: {said}"), message
    assert re.search(r"; allowed: \S", message), message

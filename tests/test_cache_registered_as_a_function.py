"""A cache backend registered as a function that picks a class (docs/plugins.md: a storage that depends on a
parameter) is read from the cache it makes, not from the function: a function has no class-level capabilities, so
whether it keeps every token is known only once it has made one. Until 2026-12-06 the engine took any registered
impl without `reach` for one that keeps every token, and refused a text past the context through a function that
makes a `window` (`ContextLengthError` suggesting "a cache that evicts", which it was)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import decodekit as dk
from decodekit import hookimpl
from decodekit.hookspecs import Registrar


def picked_window(spec: dk.CacheSpec, params: dk.Params) -> dk.KVCache:  # the registered function
    return dk.create_cache("window(size=32)", spec)


def picked_gqa(spec: dk.CacheSpec, params: dk.Params) -> dk.KVCache:
    return dk.create_cache("gqa", spec)


class Picker:
    @hookimpl
    def register_cache_backends(self, register: Registrar) -> None:
        register("picked_window", picked_window, description="a function that makes a window")
        register("picked_gqa", picked_gqa, description="a function that makes a gqa cache")


@pytest.fixture(scope="module")
def model() -> Iterator[dk.Model]:
    plugin = Picker()
    dk.register_plugin(plugin, name="test-picker")
    try:
        yield dk.load_model("tiny-shakespeare")  # context 256, rotary
    finally:
        dk.unregister_plugin(plugin)


def greedy(model: dk.Model, cache: str, max_new_tokens: int) -> list[int]:
    return dk.generate(model, "ROMEO:", chain="greedy", cache=cache, max_new_tokens=max_new_tokens).tokens[0]


def test_a_function_that_makes_an_evicting_cache_goes_past_the_context(model: dk.Model) -> None:
    assert greedy(model, "picked_window", 300) == greedy(model, "window(size=32)", 300)


def test_a_function_that_makes_a_cache_that_keeps_all_is_refused_past_the_context(model: dk.Model) -> None:
    with pytest.raises(dk.ContextLengthError, match="exceeds the model's context of 256 positions"):
        greedy(model, "picked_gqa", 300)
    assert greedy(model, "picked_gqa", 40) == greedy(model, "gqa", 40)


def returns_nothing(spec: dk.CacheSpec, params: dk.Params) -> None:  # forgot its return
    pass


class Forgetful:
    @hookimpl
    def register_cache_backends(self, register: Registrar) -> None:
        register("returns_nothing", returns_nothing, description="a function that forgot its return")


def test_a_registered_function_that_returns_no_cache_is_named_as_the_user_named_it(model: dk.Model) -> None:
    """Until 2026-12-06 the refusal showed the bound cache's dataclass repr, entry and all."""
    plugin = Forgetful()
    dk.register_plugin(plugin, name="test-forgetful")
    try:
        with pytest.raises(dk.ParameterError) as refused:
            greedy(model, "returns_nothing", 5)
    finally:
        dk.unregister_plugin(plugin)
    assert str(refused.value) == (
        "cache=returns_nothing returned None; allowed: a factory (CacheSpec) -> KVCache, or cache='none'"
    )

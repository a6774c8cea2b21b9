"""A batch through a cache backend registered as a function that picks a class (docs/plugins.md: a storage that
depends on a parameter): the function states no capabilities of its own, so no room was sized for the junk columns
a batch verified in one forward feeds past its text; until 2026-12-06 the cache it made crops rows unevenly all the
same, so the batch ran past its capacity mid-decode (`CacheCapacityError: ... got 5 more tokens after 96, past its
capacity of 99`). Its rows now run one at a time, each with the tokens it gets alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import decodekit as dk
from decodekit import hookimpl
from decodekit.hookspecs import Registrar


def picked_gqa(spec: dk.CacheSpec, params: dk.Params) -> dk.KVCache:  # the registered function
    return dk.create_cache("gqa", spec)


class Picker:
    @hookimpl
    def register_cache_backends(self, register: Registrar) -> None:
        register("picked_gqa", picked_gqa, description="a function that makes a gqa cache")


@pytest.fixture
def picker() -> Iterator[None]:
    plugin = Picker()
    dk.register_plugin(plugin, name="test-picker")
    try:
        yield
    finally:
        dk.unregister_plugin(plugin)


@pytest.mark.usefixtures("picker")
def test_a_batch_through_a_function_that_makes_a_cache_that_keeps_all() -> None:
    model = dk.load_model("tiny-shakespeare")  # its text repeats: prompt lookup's drafts are taken, rows part
    prompts = ["ROMEO: what light through yonder window", "JULIET:"]
    strategy = "speculative(k=4)"
    out = dk.decode(model, prompts, strategy=strategy, cache="picked_gqa", chain="greedy", max_new_tokens=60)
    assert (
        out.tokens
        == dk.decode(model, prompts, strategy=strategy, cache="gqa", chain="greedy", max_new_tokens=60).tokens
    )

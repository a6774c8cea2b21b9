"""The strategy conformance kit on the core's strategies, and on strategies that break a rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit.engine import sample_steps
from decodekit.params import NoParams
from decodekit.testing.strategies import StrategyConformance, check_strategy


class TestSample(StrategyConformance):
    strategy = "sample"

    def options(self) -> dict[str, Any]:
        return {"chain": "temperature(0.9) | top_k(10)"}


class TestBeam(StrategyConformance):
    strategy = "beam(num_beams=3)"


class TestBeamWithAChain(StrategyConformance):
    strategy = "beam(num_beams=2, length_penalty=0.5)"

    def options(self) -> dict[str, Any]:
        return {"chain": "repetition_penalty(1.2)", "cache": "none"}


def _unseeded(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """Samples from torch's global generator: not reproducible from the decode's seed."""
    d.open()
    for row in range(len(d.prompts)):
        while not d.emit(row, int(torch.randint(0, d.model.spec.vocab_size, ()))):
            pass
    yield


def _batch_dependent(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """One seed for the whole batch, whatever the rows' own seeds: a prompt's output depends on its batch."""
    d.open()
    g = torch.Generator().manual_seed(len(d.prompts))
    for row in range(len(d.prompts)):
        while not d.emit(row, int(torch.randint(0, d.model.spec.vocab_size, (), generator=g))):
            pass
    yield


def _greedy_ignoring_stop_strings(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    d.open()
    yield from sample_steps(d)


@pytest.mark.parametrize(
    ("policy", "check"),
    [(_unseeded, "alone != in the batch|twice gave different"), (_batch_dependent, "alone != in the batch")],
)
def test_the_kit_catches_a_strategy_that_breaks_a_rule(policy: Any, check: str) -> None:
    class Plugin:
        @dk.hookimpl
        def register_strategies(self, register: Any) -> None:
            register("broken", policy, NoParams)

    plugin = Plugin()
    dk.register_plugin(plugin, name="broken-strategy")
    try:
        with pytest.raises(AssertionError, match=check):
            check_strategy("broken")
    finally:
        dk.unregister_plugin(plugin)


def test_the_kit_passes_a_policy_written_on_the_engine() -> None:
    class Plugin:
        @dk.hookimpl
        def register_strategies(self, register: Any) -> None:
            register("plain", _greedy_ignoring_stop_strings, NoParams)

    plugin = Plugin()
    dk.register_plugin(plugin, name="plain-strategy")
    try:
        check_strategy("plain")
    finally:
        dk.unregister_plugin(plugin)

"""The strategy conformance kit on the core's strategies, and on strategies that break a rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit.engine import sample_steps
from decodekit.model import Model
from decodekit.params import NoParams
from decodekit.testing.strategies import StrategyConformance, check_strategy, kit_model


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


def _best_of_two(d: dk.Decoding, logprobs: int | None, keep: bool) -> Iterator[None]:
    """Two samples per prompt, the first kept; `logprobs` for the steps, `keep`: hand its logprobs to `finish`."""
    d.open(copies=2)
    yield from sample_steps(d, logprobs=logprobs)
    for b in range(len(d.prompts)):
        d.finish(b, d.outputs[2 * b].tokens, d.outputs[2 * b].logprobs if keep else None)


def _top_n_dropped(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """Scores its samples with logprobs=0 (the chosen tokens'), so `logprobs=n` comes back with no top n."""
    yield from _best_of_two(d, 0, keep=True)


def _logprobs_forgotten(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """Finishes each prompt without its logprobs: `logprobs=n` comes back as empty lists."""
    yield from _best_of_two(d, None, keep=False)


def _sized_by_the_batch(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """Derives its tokens from the batch's largest max_new_tokens (as a chunk size set from it would): a prompt's
    output depends on the other prompts' limits."""
    d.open()
    V, size = d.model.spec.vocab_size, d.request.max_new_tokens
    for step in range(size):
        for row, live in enumerate(d.live):
            if live:
                d.emit(row, (size + step) % V)
    yield


def _greedy_ignoring_stop_strings(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    d.open()
    yield from sample_steps(d)


@pytest.mark.parametrize(
    ("policy", "check"),
    [
        (_unseeded, "(alone != in the batch|twice gave different).*; allowed: .*never torch's global generator"),
        (_batch_dependent, "alone != in the batch; allowed: .*nor one the batch shares"),
        (
            _top_n_dropped,
            r"logprobs=3, row 0, token 0: raw_top holds 0 entries, not 3; allowed: .*logprobs=d\.request\.logprobs",
        ),
        (
            _logprobs_forgotten,
            r"logprobs=3, row 0: 0 TokenLogprobs for \d+ tokens; allowed: one per token, .*emit\(row",
        ),
    ],
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


def test_the_kit_decodes_with_a_limit_per_prompt() -> None:
    """A policy whose tokens depend on the batch's largest max_new_tokens fails only where limits differ."""

    class Plugin:
        @dk.hookimpl
        def register_strategies(self, register: Any) -> None:
            register("broken", _sized_by_the_batch, NoParams)

    class Suite(StrategyConformance):
        strategy = "broken"

    plugin = Plugin()
    dk.register_plugin(plugin, name="broken-strategy")
    try:
        Suite().test_a_prompt_alone_decodes_as_in_its_batch()  # one limit for all: nothing to see
        with pytest.raises(AssertionError, match=r"row 1: alone with max_new_tokens=2 != in the batch"):
            Suite().test_max_new_tokens_per_prompt()
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
class TestBeamOnTheGPU(StrategyConformance):
    """The kit on a model on the GPU (its logprobs check fed the model CPU tensors)."""

    strategy = "beam(num_beams=2)"

    def make_model(self) -> Model:
        return kit_model().to("cuda")  # type: ignore[attr-defined, no-any-return]

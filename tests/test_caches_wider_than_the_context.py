"""A cache wider than the model's context: a text within the context decodes through it as through `dense` (it
drops nothing). A `window` whose size + sinks pass the context is refused only where the text can pass it too, with
the words it always had; a scored cache's budget (+ slack) past the context is never refused (past the context it
moves the keys it keeps within it)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import decodekit as dk

REFUSED = (
    "cache window: size=300 (layer 0) + sinks=4 is invalid: queries would reach 304 positions back, past the model's "
    "context; allowed: size + sinks <= 256"
)


@pytest.fixture(scope="module")
def model() -> dk.Model:
    model: dk.Model = dk.load_model("tiny-shakespeare")  # context 256, rotary
    return model


def greedy(model: dk.Model, cache: str, max_new_tokens: int) -> list[int]:
    out = dk.generate(model, "ROMEO:", chain="greedy", cache=cache, max_new_tokens=max_new_tokens, stop_tokens=[])
    return out.tokens[0]


@pytest.fixture(scope="module")
def dense(model: dk.Model) -> dict[int, list[int]]:
    """The references through `dense`, by max_new_tokens: decoded once for every cache below (250 tokens each time
    was most of a case's cost)."""
    return {n: greedy(model, "dense", n) for n in (5, 250)}


@pytest.mark.parametrize(
    "cache",
    [
        "window(size=300)",
        "window(size=200, sinks=100)",
        *(
            f"{name}({budget})"
            for name in ("h2o", "snapkv", "tova", "knorm", "streaming")
            for budget in ("budget=300", "budget=250, slack=20")
        ),
    ],
)
def test_a_text_within_the_context_decodes_as_dense(model: dk.Model, dense: dict[int, list[int]], cache: str) -> None:
    assert greedy(model, cache, 5) == dense[5]  # a prompt of 6 tokens
    assert greedy(model, cache, 250) == dense[250]  # 6 + 250: the whole context, no further


@pytest.mark.parametrize("max_new_tokens", [251, 300])
def test_a_window_that_a_text_can_pass_the_context_through_is_refused_as_before(
    model: dk.Model, max_new_tokens: int
) -> None:
    with pytest.raises(dk.ParameterError, match=f"^{re.escape(REFUSED)}$"):
        greedy(model, "window(size=300)", max_new_tokens)


@pytest.mark.parametrize("cache", ["h2o(budget=300)", "streaming(budget=250, slack=20)"])
def test_a_scored_budget_past_the_context_goes_on_past_it(model: dk.Model, cache: str) -> None:
    assert len(greedy(model, cache, 300)) == 300


def test_the_window_reads_the_capacity_the_spec_states(model: dk.Model) -> None:
    """`CacheSpec.capacity`: the slots the loop will feed a row at most (docs/caches.md)."""
    dk.create_cache("window(size=300)", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=256))
    with pytest.raises(dk.ParameterError, match=f"^{re.escape(REFUSED)}$"):
        dk.create_cache("window(size=300)", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=257))


def test_speculative_decoding_of_a_batch_that_fills_the_context_through_a_wider_window(model: dk.Model) -> None:
    """A window batch verifies in one forward, feeding up to k + 1 junk slots past a row's text, which repeat its last
    position. Before the strategy sized a window for them (as for a cache that keeps every token), `window(size=300)`
    was refused for a text that fills the 256-position context, which `dk.generate` takes."""
    prompts = ["ROMEO:", "KING:"]  # 6 and 5 tokens: 6 + 250 fills the context
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 250, "stop_tokens": []}
    out = dk.decode(model, prompts, strategy="speculative(k=4)", cache="window(size=300)", **options)
    assert out.tokens == dk.generate(model, prompts, cache="dense", **options).tokens

"""A budget (+ slack) wider than the model's context is no refusal: a text within the context decodes as through
`dense` (nothing is dropped), and a longer one goes on, its kept keys moved within the context."""

from __future__ import annotations

import pytest

import decodekit as dk


@pytest.fixture(scope="module")
def model() -> dk.Model:
    return dk.load_model("tiny-shakespeare")  # context 256, rotary


def greedy(model: dk.Model, cache: str, max_new_tokens: int) -> list[int]:
    out = dk.generate(model, "ROMEO:", chain="greedy", cache=cache, max_new_tokens=max_new_tokens, stop_tokens=[])
    return out.tokens[0]


@pytest.mark.parametrize("name", ["h2o", "snapkv", "tova", "knorm", "streaming"])
def test_a_budget_past_the_context(model: dk.Model, name: str) -> None:
    for cache in (f"{name}(budget=300)", f"{name}(budget=250, slack=20)"):
        assert greedy(model, cache, 5) == greedy(model, "dense", 5)
        assert greedy(model, cache, 250) == greedy(model, "dense", 250)  # 6 + 250: the whole context
        assert len(greedy(model, cache, 300)) == 300

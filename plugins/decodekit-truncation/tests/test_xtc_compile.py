"""`xtc | sample` under `compile=True`: the step takes two uniforms per row (xtc's, then sample's). A decode's
first step runs eagerly and counts them; the engine draws as many ahead as the last step took, so every compiled
step is one graph; the tokens are the eager ones."""

from __future__ import annotations

from typing import Any

import pytest
from compile_counting import graph_runs

import decodekit as dk
from tinymodels import tiny_gpt

CHAIN = "xtc(0.5, 0.1) | sample"


@pytest.mark.xdist_group("compile")
def test_xtc_then_sample_steps_in_one_graph_with_the_eager_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: one uniform per row drawn ahead, which xtc took, so `sample` drew from the generators inside the
    step and split its graph at every step (three graphs a step, the model's forward aside)."""
    model, prompts = tiny_gpt(), [[1, 2, 3], [4, 5]]
    options: dict[str, Any] = {"chain": CHAIN, "max_new_tokens": 8, "cache": "dense", "seed": 3}
    eager = dk.generate(model, prompts, **options).tokens
    runs = graph_runs(monkeypatch)
    assert dk.generate(model, prompts, compile=True, **options).tokens == eager
    compiled = dk.generate(model, prompts, compile=True, **options)
    assert compiled.tokens == eager
    # Steps 1-7 of both decodes run the whole step's graph (14 times; step 0 is eager); before, its four pieces ran
    # at every step (16 times each).
    assert 14 in runs.values() and 16 not in runs.values()

"""`compile=True` through a cache that evicts (decodekit's attention function): the model's forward is traced
whole, with no graph break at each attention layer, so a deep model compiles a few graphs, not one per layer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from compile_counting import check_compiles_like_eager, count_graphs
from decodekit_hf import HFModel

import decodekit as dk

pytestmark = pytest.mark.xdist_group("compile")  # with the compiling tests: dynamo's state is per process

LAYERS = 10  # past dynamo's limit of 8 recompiles a function, had each layer a graph of its own


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.fx.GraphModule]]:
    compiled = count_graphs(monkeypatch)
    yield compiled
    torch._dynamo.reset()


def test_an_evicting_cache_compiles_the_forward_without_a_break_per_layer(
    build_arch: Any, graphs: list[torch.fx.GraphModule]
) -> None:
    """Before: the attention function found the forward's cache through a ContextVar, whose `get` dynamo cannot
    trace: a graph break in every layer, each layer's attention a frame of its own, recompiled per layer (its
    `layer_idx`) and per step (the window's bookkeeping) until dynamo's limit, with its warning (17 breaks and 23
    graphs here); the tokens were eager's."""
    llama = build_arch("llama", num_hidden_layers=LAYERS, num_key_value_heads=2)
    model, cache = HFModel(llama), "window(size=4, sinks=2, slack=4)"  # a 10-token prompt: evicts at once
    prompts = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60]]
    eager = dk.generate(model, prompts, chain="greedy", max_new_tokens=12, cache=cache).tokens
    torch._dynamo.utils.counters.clear()
    assert dk.generate(model, prompts, chain="greedy", max_new_tokens=12, cache=cache, compile=True).tokens == eager
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    assert len(graphs) <= 5  # the chain's step; the forward at the prompt, its first steps, then every later one


@pytest.mark.parametrize("cache", ["h2o(budget=8, recent=2, slack=4)", "knorm(budget=8, recent=2, slack=4)"])
def test_a_scored_cache_compiles_a_deep_model_in_a_few_graphs(
    build_arch: Any, graphs: list[torch.fx.GraphModule], cache: str
) -> None:
    """Before: each layer's attention called the cache's eager steps (update, mask, observe) from compiled code,
        and the frame dynamo resumed after a break was specialised on the layer (`self.layer_idx == 7`), so it was
        recompiled per layer until dynamo's limit, with its warning (18 graphs, 62 breaks here). Now a layer's whole
        attention through the cache is one eager call: the same graphs for every layer, and for any depth. `h2o`
    observes, `knorm` does not; the 10-token prompt evicts at once."""
    llama = build_arch("llama", num_hidden_layers=LAYERS, num_key_value_heads=2)
    check_compiles_like_eager(HFModel(llama), cache, graphs, most=10)  # the same at 4, 12 or 20 layers

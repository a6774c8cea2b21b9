"""`compile=True` through a cache that evicts (decodekit's attention function): each layer's attention through the
cache is one eager call, the same graphs for every layer, so a deep model compiles a few graphs, not one per layer;
and a batch job of many prompt lengths compiles as many as one of a few."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from compile_counting import check_compiles_like_eager, count_graphs, dynamo_warnings
from decodekit_hf import HFModel

import decodekit as dk

pytestmark = pytest.mark.xdist_group("compile")  # with the compiling tests: dynamo's state is per process

LAYERS = 10  # past dynamo's limit of 8 recompiles a function, had each layer a graph of its own


def test_an_evicting_cache_compiles_the_same_graphs_for_every_layer(
    build_arch: Any, graphs: list[torch.fx.GraphModule]
) -> None:
    """Before: the attention function found the forward's cache through a ContextVar, whose `get` dynamo cannot
    trace: a graph break in every layer, each layer's attention a frame of its own, recompiled per layer (its
    `layer_idx`) and per step (the window's bookkeeping) until dynamo's limit, with its warning (17 breaks and 23
    graphs here); the tokens were eager's. Since the window `runs_eagerly` a layer breaks the graph once, and
    every layer resumes into the same graph (8 graphs at 10 layers, 13 breaks)."""
    llama = build_arch("llama", num_hidden_layers=LAYERS, num_key_value_heads=2)
    model, cache = HFModel(llama), "window(size=4, sinks=2, slack=4)"  # a 10-token prompt: evicts at once
    prompts = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60]]
    eager = dk.generate(model, prompts, chain="greedy", max_new_tokens=12, cache=cache).tokens
    torch._dynamo.utils.counters.clear()
    with dynamo_warnings() as warnings:
        assert dk.generate(model, prompts, chain="greedy", max_new_tokens=12, cache=cache, compile=True).tokens == eager
    assert [w for w in warnings if "recompile_limit" in w] == []
    # Each layer's attention is one eager call (the window `runs_eagerly`): the same pieces for every layer.
    assert len(graphs) <= 8


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


def _job(model: HFModel, cache: str, batches: list[list[list[int]]]) -> list[list[list[int]]]:
    """A batch job's decodes, compiled: one `generate` per batch, as `decodekit generate --input` runs them."""
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 6, "cache": cache, "compile": True}
    return [dk.generate(model, batch, **options).tokens for batch in batches]


@pytest.mark.parametrize("cache", ["window(size=4, sinks=2, slack=4)", "dense"])
def test_a_ragged_batch_job_compiles_a_bounded_number_of_graphs(
    build_arch: Any, monkeypatch: pytest.MonkeyPatch, cache: str
) -> None:
    """Before: a job's batches of 6 prompt lengths recompiled the forward per length, its guards on the cache's
    capacity and the window's host-side bookkeeping (its `_turn`, `_oldest`, `_lengths`, `_masks`), and a padded
    batch on a dense cache broke the graph at `int(first.min()) < past`: 8+ graphs, as many as the lengths allowed
    dynamo (then its recompile limit, and eager). Now the lengths share the graphs; the tokens are eager's."""
    llama = build_arch("llama", num_hidden_layers=2, num_key_value_heads=2)
    model = HFModel(llama)
    # a window job decodes one prompt length a batch; a dense job pads ragged rows together
    lengths = [3, 5, 7, 9, 11, 13, 4, 6, 8, 10, 12, 14]
    prompts = [[(7 * n + i) % 50 + 1 for i in range(n)] for n in lengths]
    pairs = [prompts[i : i + 2] for i in range(0, len(prompts), 2)]
    batches = [[p] for p in prompts] if cache.startswith("window") else pairs
    eager = [dk.generate(model, b, chain="greedy", max_new_tokens=6, cache=cache).tokens for b in batches]
    graphs = count_graphs(monkeypatch)
    torch._dynamo.utils.counters.clear()
    with dynamo_warnings() as warnings:
        assert _job(model, cache, batches) == eager
    torch._dynamo.reset()
    assert [w for w in warnings if "recompile_limit" in w] == []
    if cache == "dense":  # the window's layers attend in one eager call each (`runs_eagerly`): a break a layer
        assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    # dense: the chain's step; the forward at the prompt, at the first step, at every later one. window: its
    # forward's pieces between the layers' eager calls, for a prefill and a step (8 at 6 lengths as at 12).
    assert len(graphs) <= (4 if cache == "dense" else 8)

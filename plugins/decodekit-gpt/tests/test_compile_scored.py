"""`compile=True` through a scored cache (its steps run eagerly) on the reference GPT: each layer's cache write and
attention are one eager call, so a deep model compiles a few graphs, not one per layer."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch
from compile_counting import count_graphs

import decodekit as dk
from tinymodels import tiny_gpt

pytestmark = pytest.mark.xdist_group("compile")  # with the compiling tests: dynamo's state is per process

LAYERS = 10  # past dynamo's limit of 8 recompiles a function, had each layer a graph of its own


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.fx.GraphModule]]:
    compiled = count_graphs(monkeypatch)
    yield compiled
    torch._dynamo.reset()


@pytest.fixture
def dynamo_warnings() -> Iterator[list[str]]:
    """The warnings dynamo logs from here on (its logger does not propagate to pytest's)."""
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.mark.parametrize("cache", ["h2o(budget=8, recent=2, slack=4)", "knorm(budget=8, recent=2, slack=4)"])
def test_a_scored_cache_compiles_a_deep_gpt_in_a_few_graphs(
    graphs: list[torch.fx.GraphModule], dynamo_warnings: list[str], cache: str
) -> None:
    """Before: each layer's attention called the cache's eager steps (update, mask, observe) from compiled code,
    and the frame dynamo resumed after a break was specialised on the layer (`self.layer == 7`), so it was
    recompiled per layer until dynamo's limit, with its warning. Now a layer's write and attention through the
    cache are one eager call: the same graphs for every layer, and for any depth. `h2o` observes, `knorm` does
    not; the 10-token prompt evicts at once."""
    model, prompts = tiny_gpt(n_layer=LAYERS), [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8]]
    for chain in ("greedy", "temperature(0.8) | top_k(20)"):
        eager = dk.generate(model, prompts, chain=chain, max_new_tokens=12, cache=cache, seed=3).tokens
        compiled = dk.generate(model, prompts, chain=chain, max_new_tokens=12, cache=cache, seed=3, compile=True)
        assert compiled.tokens == eager, chain
    assert [w for w in dynamo_warnings if "recompile_limit" in w] == []
    assert len(graphs) <= 10  # the chains' steps and the model's few pieces, the same at 4, 10 or 20 layers

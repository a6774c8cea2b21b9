"""`compile=True` through a scored cache (its steps run eagerly) on the reference GPT: each layer's cache write and
attention are one eager call, so a deep model compiles a few graphs, not one per layer."""

from __future__ import annotations

import pytest
import torch
from compile_counting import check_compiles_like_eager

from tinymodels import tiny_gpt

pytestmark = pytest.mark.xdist_group("compile")  # with the compiling tests: dynamo's state is per process

LAYERS = 10  # past dynamo's limit of 8 recompiles a function, had each layer a graph of its own


@pytest.mark.parametrize("cache", ["h2o(budget=8, recent=2, slack=4)", "knorm(budget=8, recent=2, slack=4)"])
def test_a_scored_cache_compiles_a_deep_gpt_in_a_few_graphs(graphs: list[torch.fx.GraphModule], cache: str) -> None:
    """Before: each layer's attention called the cache's eager steps (update, mask, observe) from compiled code,
    and the frame dynamo resumed after a break was specialised on the layer (`self.layer == 7`), so it was
    recompiled per layer until dynamo's limit, with its warning. Now a layer's write and attention through the
    cache are one eager call: the same graphs for every layer, and for any depth. `h2o` observes, `knorm` does
    not; the 10-token prompt evicts at once."""
    check_compiles_like_eager(tiny_gpt(n_layer=LAYERS), cache, graphs, most=10)  # the same at 4, 10 or 20 layers

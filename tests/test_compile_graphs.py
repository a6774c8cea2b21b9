"""`compile=True` compiles few graphs, however many decodes: one for the chain's step and two for the model's
forward (its first step, then every later one) over decodes of different prompt widths, and a batch job's
last, smaller batch adds none; and one model compiles for as many cache backends as a process uses. The
tokens are the eager ones.

Counted with a backend that records each graph dynamo hands it and runs it as traced: dynamo's guards, and so
its recompiles, are those inductor gets, and nothing needs a C++ compiler.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from decodekit_cli.batch_settings import parsed_chain_cache
from test_batch import _json, _run, _write_lines

import decodekit as dk
from tinymodels import tiny_gpt

pytestmark = pytest.mark.xdist_group("compile")  # with the compiling tests: dynamo's state is per process

# Two rows each, of widths 3, 6 and 4: three decodes with other widths and other cache capacities.
# tiny-shakespeare: the test GPT counts its calls in an attribute, which dynamo guards, so recompiles every step.
JOB = ["-m", "tiny-shakespeare", "--seed", "11", "--max-new-tokens", "6", "--cache", "dense", "--batch-size", "2"]
BATCHES = [[[1, 2, 3], [4, 5]], [[6, 7, 8, 9, 10, 11], [12]], [[13, 14], [15, 16, 17, 18]]]


@pytest.fixture
def graphs(graphs: list[torch.fx.GraphModule]) -> list[torch.fx.GraphModule]:
    """compile_counting's, with the chains a batch job keeps forgotten: each holds the step an earlier test compiled."""
    parsed_chain_cache.cache_clear()
    return graphs


def test_decodes_of_other_widths_compile_no_more_graphs(graphs: list[torch.fx.GraphModule]) -> None:
    model, chain = tiny_gpt(), dk.Chain.parse("temperature(0.9) | top_k(20)")
    options: dict[str, Any] = {"chain": chain, "max_new_tokens": 5, "cache": "dense", "seed": 3}
    eager = [dk.generate(model, rows, **options).tokens for rows in BATCHES]
    assert not graphs
    compiled = [dk.generate(model, rows, compile=True, **options).tokens for rows in BATCHES]
    assert compiled == eager
    assert len(graphs) == 3  # the chain's step; the model's first step, then its later ones


def test_a_batch_job_compiles_as_many_graphs_whatever_its_last_batch(
    tmp_path: Path, graphs: list[torch.fx.GraphModule]
) -> None:
    """Five prompts of 2-6 characters by two: the last batch, of one row, runs the graphs of the others."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="ROMEO: "[: 2 + 3 * i % 5]) for i in range(5)])
    eager, compiled = tmp_path / "eager.jsonl", tmp_path / "compiled.jsonl"
    assert _run(prompts, eager, *JOB).returncode == 0
    assert not graphs
    r = _run(prompts, compiled, *JOB, "--compile")
    assert r.returncode == 0, r.stderr
    assert [json.loads(line) for line in compiled.read_text().splitlines()] == [
        json.loads(line) for line in eager.read_text().splitlines()
    ]
    assert len(graphs) == 3


def test_one_model_compiles_its_forward_for_many_cache_backends(graphs: list[torch.fx.GraphModule]) -> None:
    """Each backend is a graph of its own (dynamo guards the cache's type); at dynamo's default limit of 8
    recompiles the eighth backend's forward (tova here) ran eagerly, compiling nothing."""
    model, chain = tiny_gpt(), dk.Chain.parse("greedy")
    for cache in ["dense", "gqa", "h2o", "int8", "knorm", "snapkv", "streaming", "tova"]:
        before = len(graphs)
        eager = dk.generate(model, BATCHES[0], chain=chain, max_new_tokens=6, cache=cache).tokens
        compiled = dk.generate(model, BATCHES[0], chain=chain, max_new_tokens=6, cache=cache, compile=True).tokens
        assert compiled == eager, cache
        assert len(graphs) > before, f"{cache}: nothing compiled"


def test_a_chain_with_dry_compiles_one_step_graph_without_breaks(graphs: list[torch.fx.GraphModule]) -> None:
    """dry measures every repeat of the history on the device, in as many rounds whatever the history: no host
    read breaks the step's graph, and a history a column longer each step does not recompile it."""
    model = tiny_gpt()
    options: dict[str, Any] = {"chain": "dry(0.8, 1.75, 2) | greedy", "max_new_tokens": 12, "cache": "dense"}
    prompts = [[1, 2, 3, 1, 2], [4, 5, 4]]  # repeats from the first step: dry penalises at once
    eager = dk.generate(model, prompts, **options).tokens
    torch._dynamo.utils.counters.clear()
    compiled = dk.generate(model, prompts, compile=True, **options).tokens
    assert compiled == eager
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    # The model's two graphs, and the step's one: a ragged row's length reads `ctx.step`, a symbol from the first
    # graph on (`test_a_stage_that_reads_the_step_compiles_no_graph_for_step_0`); histories of 5 to 16, no more.
    assert len(graphs) == 3


def test_a_stage_that_reads_the_step_compiles_no_graph_for_step_0(graphs: list[torch.fx.GraphModule]) -> None:
    """`min_new_tokens` branches on `ctx.step`: one step graph while the stop tokens are removed, one after, and
    none for step 0 alone. Before: the step was a plain int, which dynamo takes as a constant in a function's first
    graph and as a symbol once it changed, so step 0 had a graph of its own (3 step graphs, 5 in all)."""
    model = tiny_gpt()
    options: dict[str, Any] = {"chain": "min_new_tokens(3, [0]) | greedy", "max_new_tokens": 8, "cache": "dense"}
    eager = dk.generate(model, BATCHES[0], **options).tokens
    assert dk.generate(model, BATCHES[0], compile=True, **options).tokens == eager
    assert len(graphs) == 4  # the model's two; the step's at steps 0-2 (stop tokens removed), then at 3 on


def test_a_ray_actor_compiles_as_many_graphs_whatever_its_last_batch(
    monkeypatch: pytest.MonkeyPatch, graphs: list[torch.fx.GraphModule]
) -> None:
    """The actor (called here, without Ray) pads a short batch with copies of its last row, as the local job."""
    from decodekit_cli.batch_settings import BatchSettings
    from decodekit_ray.decoder import LineDecoder

    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)  # no Ray: no GPU of its own
    settings = BatchSettings("tiny-shakespeare", "temperature(0.9) | top_k(20)", 6, 11, "dense", compile=True)
    lines = [_json(prompt=prompt) for prompt in ["RO", "ROMEO", "ROM"]]

    def batch(first: int, end: int) -> dict[str, np.ndarray]:
        return {"line": np.arange(first + 1, end + 1), "data": np.array(lines[first:end], dtype=object)}

    actor = LineDecoder(settings, batch_size=2)
    actor(batch(0, 2))
    compiled = len(graphs)
    last = actor(batch(2, 3))
    assert len(graphs) == compiled == 3
    eager = LineDecoder(dataclasses.replace(settings, compile=False), batch_size=2)(batch(2, 3))
    assert list(last["record"]) == list(eager["record"])  # one record: the copy's is dropped


def test_a_compiled_model_and_its_weights_die_when_the_caller_drops_it(graphs: list[torch.fx.GraphModule]) -> None:
    """A sweep or a server that swaps models compiles each in turn: decodekit must not keep the ones it dropped."""

    def decoded_and_dropped(seed: int) -> list[weakref.ref[Any]]:
        model = tiny_gpt(seed=seed)
        eager = dk.generate(model, BATCHES[0], max_new_tokens=4, cache="dense", seed=5).tokens
        assert dk.generate(model, BATCHES[0], max_new_tokens=4, cache="dense", seed=5, compile=True).tokens == eager
        return [weakref.ref(model), weakref.ref(model.lm_head.weight)]

    dropped = [ref for seed in range(2) for ref in decoded_and_dropped(seed)]
    gc.collect()
    assert [ref() for ref in dropped] == [None] * len(dropped)


def test_a_decode_that_compiled_frees_its_cache_and_model_when_it_returns(graphs: list[torch.fx.GraphModule]) -> None:
    """Compiling leaves the frames it traced from in reference cycles of torch's, and those frames hold the decode:
    its cache, history and model lived on after the call, into the collector's oldest generation (a server's GPU
    cache held until a full collection, which may never come). Checked with the collector off: freed on return."""
    made: list[weakref.ref[Any]] = []

    def cache(spec: dk.CacheSpec) -> dk.KVCache:
        kv = dk.create_cache("dense", spec)
        made.append(weakref.ref(kv))
        return kv

    for seed in range(2):  # a model swapped in: compiled anew
        model = tiny_gpt(seed=seed)
        gc.collect()
        gc.disable()
        try:
            dk.generate(model, BATCHES[0], max_new_tokens=4, cache=cache, seed=5, compile=True)
            dropped = weakref.ref(model)
            del model
            alive = [ref() is not None for ref in made], dropped() is not None
        finally:
            gc.enable()
        assert graphs  # it compiled
        assert alive == ([False] * len(made), False), seed


def test_a_second_vocabulary_size_compiles_its_own_step_graph_without_breaks(
    graphs: list[torch.fx.GraphModule],
) -> None:
    """Dynamo makes a size that changes between calls a symbol: after a model of 3,000 tokens, a chain's step for
    one of 2,000 planned top_k's candidate grid from a symbolic vocabulary and broke the graph every step."""
    options: dict[str, Any] = {"chain": "top_k(5) | sample", "max_new_tokens": 4, "cache": "dense", "seed": 3}
    for vocab_size in (3000, 2000):
        model = tiny_gpt(vocab_size=vocab_size, n_layer=1)
        eager = dk.generate(model, BATCHES[0], **options).tokens
        torch._dynamo.utils.counters.clear()
        assert dk.generate(model, BATCHES[0], compile=True, **options).tokens == eager
        assert dict(torch._dynamo.utils.counters["graph_break"]) == {}, vocab_size


def test_xtc_then_sample_compiles_one_step_graph_from_the_first_step(graphs: list[torch.fx.GraphModule]) -> None:
    """The step takes two uniforms per row (xtc's, then sample's). A decode's first step runs eagerly and counts
    them, so every compiled step has both drawn ahead. Before: the first compiled step had one drawn ahead, so
    `sample` drew inside the graph and split it (4 breaks, 7 graphs)."""
    model = tiny_gpt()
    options: dict[str, Any] = {"chain": "xtc(0.5, 0.1) | sample", "max_new_tokens": 8, "cache": "dense", "seed": 3}
    eager = dk.generate(model, BATCHES[0], **options).tokens
    torch._dynamo.utils.counters.clear()
    assert dk.generate(model, BATCHES[0], compile=True, **options).tokens == eager
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == 0
    assert len(graphs) == 3  # the model's two; the step's one


def test_gumbel_draws_outside_the_step_in_one_break(graphs: list[torch.fx.GraphModule]) -> None:
    """gumbel draws a uniform per token from each row's generator, which dynamo cannot trace: the draw runs
    eagerly (`torch.compiler.disable`), the step's graph split there alone. Before: traced, the draw split the
    step into four graphs and left the division after it eager; breaks for generator calls."""
    model = tiny_gpt()
    options: dict[str, Any] = {"chain": "xtc(0.5, 0.1) | gumbel", "max_new_tokens": 8, "cache": "dense", "seed": 3}
    eager = dk.generate(model, BATCHES[0], **options).tokens
    torch._dynamo.utils.counters.clear()
    assert dk.generate(model, BATCHES[0], compile=True, **options).tokens == eager
    assert [reason.splitlines()[0] for reason in torch._dynamo.utils.counters["graph_break"]] == [
        "Skip calling `torch.compiler.disable()`d function"
    ]
    # The model's two; the step's: up to the draw (xtc, then softmax in each frame the break passes through), after
    assert len(graphs) == 6


class _EarlyNoise(dk.ProcessorBase[dk.NoParams]):
    """Takes one uniform per row for the first 3 steps, then none: a step that takes fewer than the one before."""

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        return logits + ctx.uniform(keepdim=True) if ctx.step < 3 else logits


def test_a_step_that_takes_fewer_uniforms_than_the_last_keeps_the_eager_tokens(
    graphs: list[torch.fx.GraphModule],
) -> None:
    """The uniforms drawn ahead that a step leaves are the rows' next numbers: the next step takes them first.
    Before: they were dropped, so from step 3 every row's draws were one number ahead of eager's."""
    chain = dk.Chain([_EarlyNoise()], dk.create("sample"))
    options: dict[str, Any] = {"chain": chain, "max_new_tokens": 10, "cache": "dense", "seed": 3}
    eager = dk.generate(tiny_gpt(), BATCHES[0], **options).tokens
    assert dk.generate(tiny_gpt(), BATCHES[0], compile=True, **options).tokens == eager


def test_cached_attention_traces_with_dynamic_head_counts() -> None:
    """Under dynamic shapes (as dynamo marks a size that changed between compiles) `k.shape[1] != q.shape[1]` is a
    SymBool, which SDPA's `enable_gqa` refused: a graph break in every model's attention (seen in speculative
    decoding's recompiles). A branch makes dynamo guard it instead."""
    from decodekit.cache import cached_attention

    class NoMask:
        def attention_mask(self, layer: int, positions: torch.Tensor) -> None:
            return None

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cached_attention(NoMask(), 0, q, k, v, torch.arange(q.shape[2])) * 2  # type: ignore[arg-type]

    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    for x in (q, k, v):
        torch._dynamo.maybe_mark_dynamic(x, 1)
    explained = torch._dynamo.explain(attend)(q, k, v)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(
        attend(q, k, v), 2 * torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    )

"""`torch.compile` with a backend that records each graph dynamo hands it, as traced (no inductor): tests count
graphs, recompiles and runs with it, and dynamo's warnings. A pytest plugin of the whole suite (the root conftest
loads it), so its `graphs` fixture serves the core's and the plugins' tests alike."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import decodekit as dk


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.fx.GraphModule]]:
    """The graphs `torch.compile` compiles during the test, counted by a backend in place of inductor; dynamo's
    state reset after it."""
    compiled = count_graphs(monkeypatch)
    yield compiled
    torch._dynamo.reset()


def count_graphs(monkeypatch: pytest.MonkeyPatch) -> list[torch.fx.GraphModule]:
    """From here on (until the monkeypatch is undone), the graphs `torch.compile` compiles, in order; dynamo
    forgets what earlier compiles learnt (which sizes change)."""
    compiled: list[torch.fx.GraphModule] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        compiled.append(gm)
        return gm.forward

    _compile_with(counting, monkeypatch)
    return compiled


def graph_runs(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """From here on, how many times each graph `torch.compile` compiles runs (graph i: the i-th compiled), run as
    traced (no inductor)."""
    runs: Counter[int] = Counter()

    def counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        index = len(runs)
        runs[index] = 0

        def run(*args: Any) -> Any:
            runs[index] += 1
            return gm.forward(*args)

        return run

    _compile_with(counting, monkeypatch)
    return runs


def _compile_with(backend: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """`torch.compile` with `backend` from here on; dynamo's state reset."""
    real = torch.compile

    def compile_(fn: Any, **options: Any) -> Any:
        inductor = options.pop("options", {})  # inductor's, but for the guards dynamo keeps (the chain's step)
        dynamo = {k: v for k, v in inductor.items() if k == "guard_filter_fn"}
        return real(fn, backend=backend, options=dynamo or None, **options)

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", compile_)


@contextlib.contextmanager
def dynamo_warnings() -> Iterator[list[str]]:
    """The warnings dynamo logs inside the block (its logger does not propagate to pytest's)."""
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def check_compiles_like_eager(model: Any, cache: str, graphs: list[torch.fx.GraphModule], most: int) -> None:
    """`compile=True` gives the eager tokens, greedy and sampled, with no recompile-limit warning, in at most
    `most` graphs (a deep model through a scored cache: the same graphs for every layer)."""
    prompts = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8]]  # the 10-token prompt evicts a small budget at once
    with dynamo_warnings() as warnings:
        for chain in ("greedy", "temperature(0.8) | top_k(20)"):
            options: dict[str, Any] = {"chain": chain, "max_new_tokens": 12, "cache": cache, "seed": 3}
            eager = dk.generate(model, prompts, **options).tokens
            assert dk.generate(model, prompts, compile=True, **options).tokens == eager, chain
    assert [w for w in warnings if "recompile_limit" in w] == []
    assert len(graphs) <= most

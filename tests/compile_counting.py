"""`torch.compile` with a backend that records each graph dynamo hands it, as traced (no inductor): tests count
graphs and recompiles with it."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def count_graphs(monkeypatch: pytest.MonkeyPatch) -> list[torch.fx.GraphModule]:
    """From here on (until the monkeypatch is undone), the graphs `torch.compile` compiles, in order; dynamo
    forgets what earlier compiles learnt (which sizes change)."""
    compiled: list[torch.fx.GraphModule] = []
    real = torch.compile

    def counting(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        compiled.append(gm)
        return gm.forward

    def compile_(fn: Any, **options: Any) -> Any:
        inductor = options.pop("options", {})  # inductor's, but for the guards dynamo keeps (the chain's step)
        dynamo = {k: v for k, v in inductor.items() if k == "guard_filter_fn"}
        return real(fn, backend=counting, options=dynamo or None, **options)

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", compile_)
    return compiled

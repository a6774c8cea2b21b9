"""`decodekit cache calibrate`: measure a model's attention decay (γ) and each layer's window D_f."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodekit_cli.errors import CliError

__all__ = ["DEFAULT_TEXT", "CalibrateRequest", "run_calibrate"]

# Held-out text of the default model: Hamlet, never seen in training.
DEFAULT_TEXT = Path(os.environ.get("DECODEKIT_SHAKESPEARE_DATA", "/work/shared/data")) / "shakespeare-val.txt"


@dataclass(frozen=True)
class CalibrateRequest:
    model: str
    text: Path
    sinks: int
    windows: int | None
    json_output: bool
    plot: Path | None


def run_calibrate(request: CalibrateRequest) -> int:
    import torch
    from decodekit_cache_window.calibration import calibrate
    from decodekit_gpt.gpt import GPT

    import decodekit as dk

    if not request.text.is_file():
        raise CliError(f"--text {request.text}: no such file; allowed: a held-out text file")
    model = dk.load_model(request.model)
    if not isinstance(model, GPT) or getattr(model, "tokenizer", None) is None:
        raise CliError(
            f"--model {request.model}: calibration reads the attention of decodekit's reference GPT "
            "(decodekit_gpt.gpt.GPT) with a tokenizer; this model is not one"
        )
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    tokenizer: Any = model.tokenizer
    ids = tokenizer.encode(request.text.read_text(encoding="utf-8"))
    result = calibrate(model, ids, sinks=request.sinks, max_windows=request.windows, text=request.text.name)
    if request.json_output:
        print(result.to_json())
    else:
        _render(result)
    if request.plot is not None:
        from decodekit_cli.calibrate_plot import plot_calibration

        plot_calibration(result, request.plot)
    return 0


def _render(result: object) -> None:
    from decodekit_cache_window.calibration import Calibration
    from rich.console import Console
    from rich.table import Table

    assert isinstance(result, Calibration)
    T = result.context
    table = Table(
        title=f"attention decay on {result.text} ({result.windows} windows of {T}); "
        f"D_f: the longest head's window, where its fit falls to 1/T = {1 / T:.5f}",
        title_justify="left",
    )
    # What a key would get under uniform attention, for the queries the sink weight is measured on.
    uniform = sum(1 / (i + 1) for i in range(T // 2, T)) / (T - T // 2)
    columns = ("layer", "γ", "C", "R² power", "λ", "R² exp", "law", "window per head", "D_f")
    for name in (*columns, f"sink weight (uniform {uniform:.4f})"):
        table.add_column(name, justify="right")
    for f in result.layers:
        sinks = f"{sum(f.sink_weight) / max(len(f.sink_weight), 1):.4f}"
        table.add_row(
            str(f.layer),
            f"{f.gamma:.3f}",
            f"{f.c_power:.3f}",
            f"{f.r2_power:.3f}",
            f"{f.decay:.1f}",
            f"{f.r2_exp:.3f}",
            f.law,
            " ".join(str(h.window) for h in f.heads),
            str(f.window),
            sinks,
        )
    Console().print(table)

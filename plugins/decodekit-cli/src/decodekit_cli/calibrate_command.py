"""`decodekit cache calibrate`: measure a model's attention decay (γ) and each layer's window D_f.

Every argument is checked before the model is loaded or measured (the text read and decoded, the plot's
folder, the counts); the default text is the Hamlet shipped with decodekit-shakespeare, inside the
installed package. Progress goes to stderr; the table wraps its cells instead of cutting them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodekit_cli.errors import CliError

__all__ = ["CalibrateRequest", "default_text", "run_calibrate"]


@dataclass(frozen=True)
class CalibrateRequest:
    model: str
    text: Path | None  # None: the shipped Hamlet
    sinks: int
    windows: int | None
    json_output: bool
    plot: Path | None


def default_text() -> Path:
    """The held-out text shipped with decodekit-shakespeare (Hamlet)."""
    try:
        from decodekit_shakespeare.texts import hamlet
    except ImportError:
        raise CliError(
            "no --text given, and no default text is installed (decodekit-shakespeare ships Hamlet); "
            "allowed: --text FILE, a UTF-8 text the model did not train on"
        ) from None
    return hamlet()


def read_text(request: CalibrateRequest) -> tuple[str, str]:
    """(name, content) of the text, after checking every argument: nothing runs on a bad one."""
    if request.windows is not None and request.windows < 1:
        raise CliError(f"--windows {request.windows} is invalid; allowed: an integer >= 1")
    if request.sinks < 0:
        raise CliError(f"--sinks {request.sinks} is invalid; allowed: an integer >= 0")
    if request.plot is not None:
        folder = request.plot.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise CliError(f"--plot {request.plot}: folder {folder} does not exist or is not writable")
        from decodekit_cli.explain_render import require_matplotlib

        require_matplotlib()
    path = request.text or default_text()
    option = f"--text {path}" if request.text is not None else f"the default text {path}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{option}: {exc.strerror or exc}; allowed: a readable text file") from None
    try:
        return path.name, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{option}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from None


def run_calibrate(request: CalibrateRequest) -> int:
    name, content = read_text(request)
    from decodekit_cache_window.calibration import calibrate
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    import decodekit as dk
    from decodekit.threads import threads

    model = dk.load_model(request.model)
    ids = _encode(request, model, content)
    columns = (TextColumn("measuring attention"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    bar = Progress(*columns, console=Console(stderr=True), transient=True)  # on stderr while the windows are measured
    task = bar.add_task("windows", total=None)

    def advance(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    # Whole contexts at once: enough work per op for a second thread; the caller's count given back after.
    with threads(min(2, os.cpu_count() or 1)), bar:
        result = calibrate(model, ids, sinks=request.sinks, max_windows=request.windows, text=name, progress=advance)
    if request.json_output:
        print(result.to_json())
    else:
        _render(result)
    if request.plot is not None:
        from decodekit_cli.calibrate_plot import plot_calibration

        plot_calibration(result, request.plot)
    return 0


def _encode(request: CalibrateRequest, model: Any, content: str) -> list[int]:
    """The text's ids, once the model is known to be one calibration can measure."""
    tokenizer = getattr(model, "tokenizer", None)
    spec = model.spec
    if tokenizer is None or not spec.movable_keys:
        lacks = []
        if not spec.movable_keys:
            lacks.append("its positions are not rotary (ModelSpec.rope_base and rope_frequencies are None)")
        if tokenizer is None:
            lacks.append("it has no tokenizer")
        raise CliError(
            f"--model {request.model} is invalid for calibration: {' and '.join(lacks)}; allowed: a rotary model "
            "with a tokenizer (decodekit's GPT with position='rope', a Llama-family Hugging Face model)"
        )
    T = spec.max_positions
    if request.sinks >= T // 2:
        raise CliError(f"--sinks {request.sinks} is invalid for a context of {T}; allowed: 0 <= sinks < {T // 2}")
    ids: list[int] = tokenizer.encode(content)
    if len(ids) < T:
        raise CliError(f"the text has {len(ids)} tokens; allowed: at least one context of {T} tokens")
    return ids


def _render(result: object) -> None:
    from decodekit_cache_window.calibration import Calibration
    from rich.table import Table

    from decodekit_cli.console import stdout_console

    assert isinstance(result, Calibration)
    T = result.context
    # What a key would get under uniform attention, for the queries the sink weight is measured on.
    uniform = sum(1 / (i + 1) for i in range(T // 2, T)) / (T - T // 2)
    table = Table(
        title=f"attention decay on {result.text} ({result.windows} windows of {T}); D_f: the longest head's "
        f"window, where its fit falls to 1/T = {1 / T:.5f}; sink: mean weight on a sink (uniform: {uniform:.4f})",
        title_justify="left",
    )
    for column in ("layer", "γ", "C", "R² pow", "λ", "R² exp", "law", "head windows", "D_f", "sink"):
        table.add_column(column, justify="right", overflow="fold")  # a narrow terminal wraps, never cuts
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
    stdout_console().print(table)

"""Rendering `explain_steps` reports: a rich table per step, JSON, and a grouped-bar PNG of one step."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.columns import Columns
from rich.console import Console
from rich.table import Table
from rich.text import Text

from decodekit_cli.errors import CliError
from decodekit_cli.explain import StepReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "PLOT_FORMATS",
    "check_plot_path",
    "ended_text",
    "plot_step",
    "render_steps",
    "require_matplotlib",
    "step_figure",
    "steps_json",
    "token_label",
]

# What matplotlib's Agg-based canvases write, by file suffix.
PLOT_FORMATS = ("eps", "jpeg", "jpg", "pdf", "png", "ps", "svg", "svgz", "tif", "tiff", "webp")


def require_matplotlib() -> None:
    """`--plot`'s one dependency, which `make run` and the README's installs leave out: checked before any work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install matplotlib") from None


def check_plot_path(path: Path) -> None:
    """Fail before any work when `--plot` names a format matplotlib cannot write or a place it cannot write to."""
    require_matplotlib()
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise CliError(f"--plot {str(path)!r}: unknown image format {suffix!r}; allowed: {', '.join(PLOT_FORMATS)}")
    folder = path.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise CliError(f"--plot {str(path)!r}: cannot write there (is {str(folder)!r} an existing, writable folder?)")


def token_label(token: int, text: str | None) -> str:
    """How a token is shown: its text quoted (escapes visible), or `#id` without a tokenizer or without text
    (a special token, such as EOS)."""
    return repr(text) if text else f"#{token}"


def ended_text(report: StepReport) -> str:
    """What ended the row, as the text says it: a stage's name, or the stop token's id with its text (the row's
    last token: `generate --json`'s `stopped_by` is the id, its `tokens` end with it)."""
    if not isinstance(report.ended_by, int):
        return str(report.ended_by)
    text = report.text if report.token == report.ended_by else None
    return f"token {report.ended_by} ({text!r})" if text else f"token {report.ended_by}"


def render_steps(console: Console, reports: list[StepReport], top: int, names: list[str] | None = None) -> None:
    """A table per step; `names` name the stages ("input" first) in place of the reports' chain-string forms."""
    for r in reports:
        final = r.stages[-1]
        p = final.probs[r.candidates.index(r.token)]
        table = Table(
            title=Text(f"step {r.step}: picked {token_label(r.token, r.text)} (p = {p:.3f} after the chain)"),
            title_justify="left",
            title_style="bold",
        )
        table.add_column("stage", overflow="fold")
        table.add_column("tokens", justify="right", no_wrap=True)
        table.add_column("entropy", justify="right", no_wrap=True)
        table.add_column(f"top {top} (probability)", ratio=1)
        labels = dict(zip(r.candidates, (token_label(t, x) for t, x in zip(r.candidates, r.texts))))
        for stage, name in zip(r.stages, names or [s.stage for s in r.stages]):
            cells = [
                Text(f"{labels[token]} {prob:.3f}", style="bold green" if token == r.token else "", no_wrap=True)
                for token, prob in stage.top(r.candidates, top)
            ]
            table.add_row(Text(name), str(stage.survivors), f"{stage.entropy:.3f}", Columns(cells, padding=(0, 2)))
        console.print(table)
        if r.ended_by is not None:
            console.print(Text(f"ended after step {r.step}: stopped by {ended_text(r)}"))


def steps_json(reports: list[StepReport], **header: Any) -> dict[str, Any]:
    return {**header, "steps": [{**asdict(r), "text": r.text} for r in reports]}


def plot_step(report: StepReport, path: Path, names: list[str] | None = None) -> None:
    """Write a PNG: for each candidate token, one bar per stage (named by `names`, as `render_steps`) with its
    probability after that stage."""
    try:
        step_figure(report, names).savefig(path, dpi=110)
    except (OSError, ValueError) as exc:
        raise CliError(f"--plot {str(path)!r}: cannot write it: {exc}", exit_code=1) from None


def step_figure(report: StepReport, names: list[str] | None = None) -> Figure:
    """The figure `plot_step` writes; its legend, one stage per line, sits inside it on the right."""
    require_matplotlib()
    from matplotlib.figure import Figure  # the object API: no pyplot state, renders with Agg

    n_stages, n_tokens = len(report.stages), len(report.candidates)
    width = 0.8 / n_stages
    bars = max(5.0, 0.35 * n_tokens * max(2, n_stages) ** 0.5 + 1)  # inches for the bars; the legend's on top
    fig = Figure(figsize=(bars + 4.0, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for s, (stage, name) in enumerate(zip(report.stages, names or [s.stage for s in report.stages])):
        xs = [i + (s - (n_stages - 1) / 2) * width for i in range(n_tokens)]
        tokens = "1 token" if stage.survivors == 1 else f"{stage.survivors} tokens"
        ax.bar(xs, stage.probs, width=width, label=f"{name} ({tokens})")
    ax.set_xticks(range(n_tokens))
    labels = [token_label(t, x) for t, x in zip(report.candidates, report.texts)]
    ax.set_xticklabels(labels, rotation=45 if n_tokens > 10 else 0, ha="right" if n_tokens > 10 else "center")
    picked = report.candidates.index(report.token)
    ax.get_xticklabels()[picked].set_fontweight("bold")
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1.05 * max(max(stage.probs) for stage in report.stages))
    ax.set_title(f"step {report.step}: probability after each stage (picked {labels[picked]})")
    # Outside the axes, inside the figure: constrained layout narrows the axes to make room, so a
    # long chain's labels are never cut (a centred legend below grew wider than the figure).
    fig.legend(loc="outside right upper", fontsize="small", frameon=False)
    return fig

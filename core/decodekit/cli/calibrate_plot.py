"""The calibration plot: each layer's a(d) on log-log axes, its fitted power law, and D_f."""

from __future__ import annotations

from pathlib import Path

from decodekit.calibration import Calibration
from decodekit.cli.errors import CliError

__all__ = ["plot_calibration"]


def plot_calibration(result: Calibration, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise CliError("--plot needs matplotlib: pip install 'decodekit[plot]'") from exc
    fig, ax = plt.subplots(figsize=(7, 4.5))
    T = result.context
    for fit, profile in zip(result.layers, result.profile):
        d = list(range(1, len(profile)))
        (line,) = ax.loglog(d, profile[1:], lw=1.2, label=f"layer {fit.layer}: γ={fit.gamma:.2f}, D_f={fit.window}")
        ax.loglog(d, [fit.c_power * x**-fit.gamma for x in d], ls="--", lw=0.8, color=line.get_color())
        ax.axvline(fit.window, color=line.get_color(), ls=":", lw=1)
    ax.axhline(1 / T, color="grey", lw=0.8)
    ax.text(1.1, 1 / T * 1.15, "1/T (uniform over the context)", color="grey", fontsize=8)
    ax.set_xlabel("distance d (tokens back)")
    ax.set_ylabel("mean attention weight a(d)")
    ax.set_title(f"Attention decay on {result.text}: measured (solid), C·d^-γ (dashed), D_f (dotted)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

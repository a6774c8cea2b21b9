"""The calibration plot: each layer's a(d) on log-log axes, its fitted law, its longest head's, and D_f."""

from __future__ import annotations

import math
from pathlib import Path

from decodekit_cache_window.calibration import Calibration

__all__ = ["plot_calibration"]


def _curve(law: str, c: float, rate: float, d: list[int]) -> list[float]:
    return [c * x**-rate if law == "power" else c * math.exp(-x / rate) for x in d]


def plot_calibration(result: Calibration, path: Path) -> None:
    import matplotlib  # calibrate_command.read_text has checked it is installed

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    T = result.context
    for fit, profile in zip(result.layers, result.profile):
        d = list(range(1, len(profile)))
        longest = max(fit.heads, key=lambda h: h.window)
        label = f"layer {fit.layer}: γ={fit.gamma:.2f}; head {longest.head}: D_f={fit.window}"
        (line,) = ax.loglog(d, profile[1:], lw=1.2, label=label)
        color = line.get_color()
        c, rate = (fit.c_power, fit.gamma) if fit.law == "power" else (fit.c_exp, fit.decay)
        ax.loglog(d, _curve(fit.law, c, rate, d), ls="--", lw=0.8, color=color)
        ax.loglog(d, _curve(fit.law, longest.c, longest.rate, d), ls="-.", lw=0.8, color=color)
        ax.axvline(fit.window, color=color, ls=":", lw=1)
    ax.axhline(1 / T, color="grey", lw=0.8)
    ax.text(1.1, 1 / T * 1.15, "1/T (uniform over the context)", color="grey", fontsize=8)
    ax.set_xlabel("distance d (tokens back)")
    ax.set_ylabel("mean attention weight a(d)")
    ax.set_title(
        f"Attention decay on {result.text}: mean over heads (solid), its fit (dashed),\n"
        "the fit of the longest-reaching head (dash-dot), D_f where that one meets 1/T (dotted)",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""γ and D_f: how a model's attention decays with distance, and the window each layer needs.

`calibrate(model, ids)` cuts held-out text into windows of the trained context `T`, runs
the reference GPT over them, and measures each layer's mean attention weight `a_l(d)` on
the key `d` positions back (averaged over heads, windows and queries; keys among the first
`sinks` positions are left out of `a_l(d)` and reported apart, as `sink_weight`). It fits

    power law     a_l(d) ≈ C_l · d^(−γ_l)          (least squares on log a against log d)
    exponential   a_l(d) ≈ C_l · exp(−d / λ_l)     (least squares on log a against d)

at 48 log-spaced distances in `1 <= d < T - sinks` (evenly spaced `d` would let the long, flat
tail outvote the near range where the decay happens), reports both with their R² (in log
space), and derives the window
from the better one by one rule with no constant of ours: `D_f(l)` is the distance at which the
fitted weight falls to `1 / T`, what uniform attention over the trained context gives each key
(power: `D_f = (C·T)^(1/γ)`; exponential: `D_f = λ·ln(C·T)`), clamped to `[1, T - sinks]`.
docs/caches.md derives and checks the rule.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from decodekit.errors import ParameterError
from decodekit.models.gpt import GPT, Block
from decodekit.rope import apply_rope, rope_angles

__all__ = ["CALIBRATION_NAME", "Calibration", "LayerFit", "attention_profile", "calibrate", "fit_layer"]

CALIBRATION_NAME = "calibration.json"  # shipped next to a model's weights
FIT_POINTS = 48  # log-spaced distances the laws are fitted at


@dataclass(frozen=True)
class LayerFit:
    """One layer's decay law and window."""

    layer: int
    gamma: float  # power law: a(d) ≈ c_power · d^(-gamma)
    c_power: float
    r2_power: float
    decay: float  # exponential: a(d) ≈ c_exp · exp(-d / decay)
    c_exp: float
    r2_exp: float
    law: Literal["power", "exponential"]  # the better fit, which sets the window
    window: int  # D_f: where the chosen law falls to 1 / T
    sink_weight: list[float]  # mean weight on each sink key, queries in the second half of a window


@dataclass
class Calibration:
    """The measured profile `a_l(d)` of every layer, the fits and the windows, as `calibration.json` holds them."""

    context: int  # T: the trained context the windows were cut to
    sinks: int
    windows: int  # windows of text measured
    text: str
    layers: list[LayerFit]
    profile: list[list[float]] = field(repr=False)  # profile[l][d] = a_l(d), d = 0 .. T - sinks - 1

    @property
    def attention_windows(self) -> tuple[int, ...]:
        return tuple(fit.window for fit in self.layers)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        raw = json.loads(text)
        layers = [LayerFit(**layer) for layer in raw.pop("layers")]
        return cls(layers=layers, **raw)

    @classmethod
    def load(cls, path: Path) -> Calibration:
        return cls.from_json(path.read_text(encoding="utf-8"))


@torch.no_grad()
def attention_profile(model: GPT, windows: Tensor, sinks: int) -> tuple[Tensor, Tensor]:
    """`a [L, T - sinks]`: mean weight on the key `d` back (keys at positions >= sinks), and
    `sink [L, sinks]`: mean weight on each sink key from queries in the window's second half.

    windows: `[N, T]` token ids, each window at positions 0 .. T-1 (as in training).
    """
    c = model.config
    N, T = windows.shape
    if c.position != "rope":
        raise ParameterError("calibrate: the model has learned positions; allowed: a rotary model (position='rope')")
    H, D = c.n_head, c.head_dim
    rope = rope_angles(torch.arange(T)[None], D, c.rope_base)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    total = torch.zeros(c.n_layer, T - sinks, dtype=torch.float64)
    count = torch.zeros(T - sinks, dtype=torch.float64)
    sink = torch.zeros(c.n_layer, sinks, dtype=torch.float64)
    x = model.wte(windows)
    Hkv = c.kv_heads
    for layer, block in enumerate(model.h):
        assert isinstance(block, Block)
        q, k, _ = block.attn.c_attn(block.ln_1(x)).split([c.n_embd, Hkv * D, Hkv * D], dim=2)
        q = apply_rope(q.view(N, T, H, D).transpose(1, 2), *rope)
        k = apply_rope(k.view(N, T, Hkv, D).transpose(1, 2), *rope)
        k = k.repeat_interleave(H // Hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        probs = F.softmax(scores.masked_fill(~causal, float("-inf")), -1)  # [N, H, T, T]
        for d in range(T - sinks):
            diag = probs.diagonal(offset=-d, dim1=-2, dim2=-1)[..., sinks:]  # P[i, i-d] with key i-d >= sinks
            total[layer, d] = diag.double().sum()
            count[d] = diag.numel()
        sink[layer] = probs[:, :, T // 2 :, :sinks].double().mean((0, 1, 2))
        x = block(x, None, None, rope)
    return total / count, sink


def _line(x: Tensor, y: Tensor) -> tuple[float, float, float]:
    """Least squares `y ≈ a + b·x`: (a, b, R²)."""
    A = torch.stack([torch.ones_like(x), x], 1)
    coef = torch.linalg.lstsq(A, y[:, None]).solution[:, 0]
    resid = y - A @ coef
    r2 = 1 - float(resid.pow(2).sum() / (y - y.mean()).pow(2).sum())
    return float(coef[0]), float(coef[1]), r2


def fit_layer(layer: int, a: Tensor, context: int, sinks: int, sink_weight: list[float]) -> LayerFit:
    """Fit both decay laws to `a[d]` at log-spaced `1 <= d < len(a)` and derive `D_f` from the better one."""
    grid = torch.logspace(0, math.log10(a.numel() - 1), FIT_POINTS, dtype=torch.float64).round()
    d = torch.tensor(sorted(set(grid.tolist())), dtype=torch.float64)  # distinct distances
    log_a = a.double()[d.long()].clamp(min=1e-30).log()
    log_c, slope, r2_power = _line(d.log(), log_a)
    log_ce, slope_e, r2_exp = _line(d, log_a)
    gamma, decay = -slope, (-1 / slope_e if slope_e < 0 else math.inf)
    law: Literal["power", "exponential"] = "power" if r2_power >= r2_exp else "exponential"
    top = context - sinks
    if law == "power":
        # C·D^(-γ) = 1/T  =>  D = (C·T)^(1/γ)
        window = math.exp((log_c + math.log(context)) / gamma) if gamma > 0 else math.inf
    else:
        # C·exp(-D/λ) = 1/T  =>  D = λ·ln(C·T)
        window = decay * (log_ce + math.log(context))
    return LayerFit(
        layer=layer,
        gamma=gamma,
        c_power=math.exp(log_c),
        r2_power=r2_power,
        decay=decay,
        c_exp=math.exp(log_ce),
        r2_exp=r2_exp,
        law=law,
        window=int(min(max(math.ceil(window), 1), top)) if math.isfinite(window) else top,
        sink_weight=sink_weight,
    )


def calibrate(
    model: GPT, ids: list[int] | Tensor, *, sinks: int = 4, max_windows: int | None = None, text: str = ""
) -> Calibration:
    """Measure `a_l(d)` on `ids` (held-out text) in non-overlapping windows of the model's context; fit; derive D_f."""
    T = model.config.block_size
    data = torch.as_tensor(ids, dtype=torch.long)
    n = data.numel() // T
    if n < 1:
        raise ParameterError(f"calibrate: {data.numel()} tokens; allowed: at least one context of {T} tokens")
    if not 0 <= sinks < T // 2:
        raise ParameterError(f"calibrate: sinks={sinks} is invalid; allowed: 0 <= sinks < {T // 2}")
    if max_windows is not None and max_windows < n:
        # Evenly spread over the text, not its first pages.
        starts = torch.linspace(0, n - 1, max_windows).round().long() * T
    else:
        starts = torch.arange(n) * T
    windows = torch.stack([data[s : s + T] for s in starts.tolist()])
    was_training = model.training
    model.eval()
    try:
        totals = torch.zeros(model.config.n_layer, T - sinks, dtype=torch.float64)
        sink = torch.zeros(model.config.n_layer, sinks, dtype=torch.float64)
        for batch in torch.split(windows, 16):
            a, s = attention_profile(model, batch, sinks)
            totals += a * len(batch)
            sink += s * len(batch)
    finally:
        model.train(was_training)
    profile = totals / len(windows)
    sink /= len(windows)
    layers = [fit_layer(layer, profile[layer], T, sinks, sink[layer].tolist()) for layer in range(len(profile))]
    return Calibration(context=T, sinks=sinks, windows=len(windows), text=text, layers=layers, profile=profile.tolist())

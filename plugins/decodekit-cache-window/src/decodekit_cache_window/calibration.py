"""γ and D_f: how a model's attention decays with distance, and the window each layer needs.

`calibrate(model, ids)` cuts text into windows of the trained context `T`, runs the reference
GPT over them, and measures each query head's mean attention weight `a_{l,h}(d)` on the key
`d` positions back (averaged over windows and queries; keys among the first `sinks` positions
are left out and reported apart, as `sink_weight`). On the layer's mean over heads `a_l(d)` it fits

    power law     a_l(d) ≈ C_l · d^(−γ_l)          (least squares on log a against log d)
    exponential   a_l(d) ≈ C_l · exp(−d / λ_l)     (least squares on log a against d)

at 48 log-spaced distances in `1 <= d < T - sinks` (evenly spaced `d` would let the long, flat
tail outvote the near range where the decay happens), reports both with their R² (in log
space) and takes the better one as the layer's law. Each head is fitted with that law, and
its window is where its fitted weight falls to `1 / T`, what uniform attention over the
trained context gives each key (power: `(C·T)^(1/γ)`; exponential: `λ·ln(C·T)`), clamped to
`[1, T - sinks]`. One cache serves all of a layer's heads, so the layer's window `D_f(l)` is
the longest of its heads'. No constant of ours; docs/caches.md derives and checks the rule.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from decodekit_gpt.gpt import GPT, Block, LayerInputs
from torch import Tensor

from decodekit.errors import ParameterError
from decodekit.rope import apply_rope, rope_angles

__all__ = ["CALIBRATION_NAME", "Calibration", "HeadFit", "LayerFit", "attention_profile", "calibrate", "fit_layer"]

CALIBRATION_NAME = "calibration.json"  # shipped next to a model's weights
FIT_POINTS = 48  # log-spaced distances the laws are fitted at


Law = Literal["power", "exponential"]


@dataclass(frozen=True)
class HeadFit:
    """One query head's fit with its layer's law: a(d) ≈ c · d^(-rate) (power) or c · exp(-d / rate)."""

    head: int
    c: float
    rate: float  # γ (power) or λ (exponential)
    r2: float
    window: int  # where the fitted weight falls to 1 / T


@dataclass(frozen=True)
class LayerFit:
    """One layer's decay law (fitted to the mean over its heads), its heads' fits and its window."""

    layer: int
    gamma: float  # power law: a(d) ≈ c_power · d^(-gamma)
    c_power: float
    r2_power: float
    decay: float  # exponential: a(d) ≈ c_exp · exp(-d / decay)
    c_exp: float
    r2_exp: float
    law: Law  # the better fit of the mean, which every head is fitted with
    window: int  # D_f: the longest of the heads' windows
    sink_weight: list[float]  # mean weight on each sink key, queries in the second half of a window
    heads: list[HeadFit]


@dataclass
class Calibration:
    """The measured profile `a_l(d)` of every layer, the fits and the windows, as `calibration.json` holds them."""

    context: int  # T: the trained context the windows were cut to
    sinks: int
    windows: int  # windows of text measured
    text: str
    layers: list[LayerFit]
    profile: list[list[float]] = field(repr=False)  # profile[l][d] = a_l(d), mean over heads, d = 0 .. T - sinks - 1

    @property
    def attention_windows(self) -> tuple[int, ...]:
        return tuple(fit.window for fit in self.layers)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        raw = json.loads(text)
        try:
            layers = [
                LayerFit(**{**layer, "heads": [HeadFit(**h) for h in layer["heads"]]}) for layer in raw.pop("layers")
            ]
            return cls(layers=layers, **raw)
        except (KeyError, TypeError) as exc:  # a file of another version, or not a calibration at all
            raise ParameterError(
                f"calibration: {exc} is missing or unexpected; allowed: the JSON of `decodekit cache calibrate "
                "--json` (files written before per-head fits have no 'heads': calibrate again)"
            ) from None

    @classmethod
    def load(cls, path: Path) -> Calibration:
        return cls.from_json(path.read_text(encoding="utf-8"))


@torch.no_grad()
def attention_profile(model: GPT, windows: Tensor, sinks: int) -> tuple[Tensor, Tensor]:
    """`a [L, H, T - sinks]`: each query head's mean weight on the key `d` back (keys at positions
    >= sinks), and `sink [L, sinks]`: mean weight on each sink key from queries in the window's
    second half (over heads).

    windows: `[N, T]` token ids, each window at positions 0 .. T-1 (as in training).
    """
    c = model.config
    N, T = windows.shape
    if c.position != "rope":
        raise ParameterError("calibrate: the model has learned positions; allowed: a rotary model (position='rope')")
    H, D = c.n_head, c.head_dim
    rope = rope_angles(torch.arange(T)[None], D, c.rope_base)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    total = torch.zeros(c.n_layer, H, T - sinks, dtype=torch.float64)
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
            diag = probs.diagonal(offset=-d, dim1=-2, dim2=-1)[..., sinks:]  # [N, H, *]: P[i, i-d], key i-d >= sinks
            total[layer, :, d] = diag.double().sum((0, 2))
            count[d] = diag.shape[0] * diag.shape[2]
        sink[layer] = probs[:, :, T // 2 :, :sinks].double().mean((0, 1, 2))
        x = block(x, LayerInputs(mask=None, cache=None, rope=rope, positions=None))
    return total / count, sink


def _line(x: Tensor, y: Tensor) -> tuple[float, float, float]:
    """Least squares `y ≈ a + b·x`: (a, b, R²)."""
    A = torch.stack([torch.ones_like(x), x], 1)
    coef = torch.linalg.lstsq(A, y[:, None]).solution[:, 0]
    resid = y - A @ coef
    r2 = 1 - float(resid.pow(2).sum() / (y - y.mean()).pow(2).sum())
    return float(coef[0]), float(coef[1]), r2


def _fit(a: Tensor, law: Law) -> tuple[float, float, float]:
    """`(C, rate, R²)` of `law` fitted to `a[d]` at log-spaced `1 <= d < len(a)` (rate: γ or λ)."""
    grid = torch.logspace(0, math.log10(a.numel() - 1), FIT_POINTS, dtype=torch.float64).round()
    d = torch.tensor(sorted(set(grid.tolist())), dtype=torch.float64)  # distinct distances
    log_a = a.double()[d.long()].clamp(min=1e-30).log()
    log_c, slope, r2 = _line(d.log() if law == "power" else d, log_a)
    if law == "power":
        return math.exp(log_c), -slope, r2
    return math.exp(log_c), (-1 / slope if slope < 0 else math.inf), r2


def _window(law: Law, c: float, rate: float, context: int, top: int) -> int:
    """Where the fitted weight falls to `1 / T`, clamped to `[1, top]`."""
    # power: C·D^(-γ) = 1/T  =>  D = (C·T)^(1/γ);  exponential: C·exp(-D/λ) = 1/T  =>  D = λ·ln(C·T)
    power = (c * context) ** (1 / rate) if rate > 0 else math.inf
    window = power if law == "power" else rate * math.log(c * context)
    return int(min(max(math.ceil(window), 1), top)) if math.isfinite(window) else top


def fit_layer(layer: int, a: Tensor, context: int, sinks: int, sink_weight: list[float]) -> LayerFit:
    """Fit both laws to the mean over heads of `a [H, T - sinks]`, each head with the better one; D_f: the longest."""
    mean = a.double().mean(0)
    c_power, gamma, r2_power = _fit(mean, "power")
    c_exp, decay, r2_exp = _fit(mean, "exponential")
    law: Law = "power" if r2_power >= r2_exp else "exponential"
    top = context - sinks
    heads = []
    for head, row in enumerate(a):
        c, rate, r2 = _fit(row, law)
        heads.append(HeadFit(head=head, c=c, rate=rate, r2=r2, window=_window(law, c, rate, context, top)))
    return LayerFit(
        layer=layer,
        gamma=gamma,
        c_power=c_power,
        r2_power=r2_power,
        decay=decay,
        c_exp=c_exp,
        r2_exp=r2_exp,
        law=law,
        window=max(head.window for head in heads),
        sink_weight=sink_weight,
        heads=heads,
    )


def calibrate(
    model: GPT, ids: list[int] | Tensor, *, sinks: int = 4, max_windows: int | None = None, text: str = ""
) -> Calibration:
    """Measure `a_{l,h}(d)` on `ids` in non-overlapping windows of the model's context; fit; derive D_f."""
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
        c = model.config
        totals = torch.zeros(c.n_layer, c.n_head, T - sinks, dtype=torch.float64)
        sink = torch.zeros(c.n_layer, sinks, dtype=torch.float64)
        for batch in torch.split(windows, 16):
            a, s = attention_profile(model, batch, sinks)
            totals += a * len(batch)
            sink += s * len(batch)
    finally:
        model.train(was_training)
    profile = totals / len(windows)  # [L, H, T - sinks]
    sink /= len(windows)
    layers = [fit_layer(layer, profile[layer], T, sinks, sink[layer].tolist()) for layer in range(len(profile))]
    mean = profile.mean(1).tolist()
    return Calibration(context=T, sinks=sinks, windows=len(windows), text=text, layers=layers, profile=mean)

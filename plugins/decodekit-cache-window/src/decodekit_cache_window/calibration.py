"""γ and D_f: how a model's attention decays with distance, and the window each layer needs.

`calibrate(model, ids)` cuts text into windows of the trained context `T`, runs the model over
them (any rotary model whose attention hands its queries to a cache that observes: decodekit's
GPT, a Hugging Face model through decodekit-hf), and measures each query head's mean attention
weight `a_{l,h}(d)` on the key
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pydantic
import torch
from torch import Tensor

from decodekit.cache import PreallocatedKVCache
from decodekit.errors import ParameterError
from decodekit.spec import CacheSpec

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
    def from_json(cls, text: str, source: str = "calibration") -> Calibration:
        """The calibration in `text`; a `ParameterError` naming `source` and what is wrong otherwise."""
        try:
            raw = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ParameterError(f"{source}: not a calibration: {exc}; allowed: {_ALLOWED}") from None
        try:
            calibration = _ADAPTER.validate_python(raw)
        except pydantic.ValidationError as exc:
            raise ParameterError(f"{source}: {_first_error(exc)}; allowed: {_ALLOWED}") from None
        except RecursionError:
            raise ParameterError(f"{source}: nested too deeply; allowed: {_ALLOWED}") from None
        if not calibration.layers or any(fit.window < 1 for fit in calibration.layers):
            raise ParameterError(f"{source}: no layers, or a window below 1; allowed: {_ALLOWED}")
        return calibration

    @classmethod
    def load(cls, path: Path) -> Calibration:
        """The calibration file `path`; a `ParameterError` naming the file if it is missing, unreadable or wrong."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ParameterError(f"calibration file {path}: cannot be read ({exc}); allowed: {_ALLOWED}") from None
        return cls.from_json(text, f"calibration file {path}")


_ALLOWED = (
    "the JSON of `decodekit cache calibrate --json` (files written before per-head fits have no 'heads': "
    "calibrate again)"
)
_ADAPTER: pydantic.TypeAdapter[Calibration] = pydantic.TypeAdapter(Calibration)


def _first_error(exc: pydantic.ValidationError) -> str:
    """pydantic's first complaint, as `layers.0.heads: Field required`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "its top level"
    return f"{where}: {error['msg']}"


class _ProfileCache(PreallocatedKVCache):
    """Keeps a batch of whole windows; each layer's observed queries give its attention weights, added up by
    distance: `total[l, h, d]` over keys at positions >= sinks, `sink[l, i]` on sink `i` (second-half queries)."""

    def __init__(self, spec: CacheSpec, sinks: int) -> None:
        super().__init__(spec)
        T = spec.capacity
        self.sinks = sinks
        self.total = torch.zeros(spec.n_layers, spec.n_heads, T - sinks, dtype=torch.float64)
        self.sink = torch.zeros(spec.n_layers, sinks, dtype=torch.float64)
        self._keys: list[Tensor] = [torch.empty(0)] * spec.n_layers

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = super().update(layer, k, v)
        self._keys[layer] = keys
        return keys, values

    def observe(self, layer: int, queries: Tensor) -> None:
        _, H, T, D = queries.shape
        keys = self._keys[layer].repeat_interleave(H // self._keys[layer].shape[1], dim=1)
        scores = (queries.float() @ keys.float().transpose(-1, -2)) / math.sqrt(D)
        causal = torch.ones(T, T, dtype=torch.bool, device=scores.device).tril()  # whole windows, unpadded
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)  # [N, H, T, T]
        s = self.sinks
        for d in range(T - s):
            diag = probs.diagonal(offset=-d, dim1=-2, dim2=-1)[..., s:]  # [N, H, *]: P[i, i-d], key i-d >= sinks
            self.total[layer, :, d] += diag.double().sum((0, 2))
        self.sink[layer] += probs[:, :, T // 2 :, :s].double().mean((1, 2)).sum(0)


@torch.no_grad()
def attention_profile(model: Any, windows: Tensor, sinks: int) -> tuple[Tensor, Tensor]:
    """`a [L, H, T - sinks]`: each query head's mean weight on the key `d` back (keys at positions
    >= sinks), and `sink [L, sinks]`: mean weight on each sink key from queries in the window's
    second half (over heads).

    windows: `[N, T]` token ids, each window at positions 0 .. T-1 (as in training). The model runs
    once over them through a cache that observes its attention (docs/caches.md, `Observing`).
    """
    N, T = windows.shape
    if not model.spec.movable_keys:
        raise ParameterError(
            "calibrate: the model's keys cannot move (learned positions, or a rotary embedding decodekit does not "
            "re-rotate: spec.movable_keys is False); allowed: a rotary model, whose "
            "windows a cache can move past the context"
        )
    cache = _ProfileCache(CacheSpec.for_model(model.spec, batch_size=N, capacity=T), sinks)
    model(windows, torch.arange(T).expand(N, T), cache)
    count = torch.tensor([N * (T - sinks - d) for d in range(T - sinks)], dtype=torch.float64)
    return cache.total / count, cache.sink / N


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
    model: Any,
    ids: list[int] | Tensor,
    *,
    sinks: int = 4,
    max_windows: int | None = None,
    text: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> Calibration:
    """Measure `a_{l,h}(d)` on `ids` in non-overlapping windows of the model's context; fit; derive D_f.

    progress: called with (windows measured, windows in all) after each batch of 16.
    """
    spec = model.spec
    T = spec.max_positions
    data = torch.as_tensor(ids, dtype=torch.long)
    n = data.numel() // T
    if n < 1:
        raise ParameterError(f"calibrate: {data.numel()} tokens; allowed: at least one context of {T} tokens")
    if not 0 <= sinks < T // 2:
        raise ParameterError(f"calibrate: sinks={sinks} is invalid; allowed: 0 <= sinks < {T // 2}")
    if max_windows is not None and max_windows < 1:
        raise ParameterError(f"calibrate: max_windows={max_windows} is invalid; allowed: None (every window) or >= 1")
    if max_windows is not None and max_windows < n:
        # Evenly spread over the text, not its first pages.
        starts = torch.linspace(0, n - 1, max_windows).round().long() * T
    else:
        starts = torch.arange(n) * T
    windows = torch.stack([data[s : s + T] for s in starts.tolist()])
    totals = torch.zeros(spec.n_layers, spec.n_heads, T - sinks, dtype=torch.float64)
    sink = torch.zeros(spec.n_layers, sinks, dtype=torch.float64)
    done = 0
    for batch in torch.split(windows, 16):
        a, s = attention_profile(model, batch, sinks)
        totals += a * len(batch)
        sink += s * len(batch)
        done += len(batch)
        if progress is not None:
            progress(done, len(windows))
    profile = totals / len(windows)  # [L, H, T - sinks]
    sink /= len(windows)
    layers = [fit_layer(layer, profile[layer], T, sinks, sink[layer].tolist()) for layer in range(len(profile))]
    mean = profile.mean(1).tolist()
    return Calibration(context=T, sinks=sinks, windows=len(windows), text=text, layers=layers, profile=mean)

"""Shapes of models and caches: `ModelSpec` and `CacheSpec`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from decodekit.errors import ParameterError
from decodekit.rope import frequencies

__all__ = ["CacheSpec", "ModelSpec"]


def _check_shape(owner: str, spec: ModelSpec | CacheSpec, positive: tuple[str, ...]) -> None:
    for name in positive:
        _check_shape_field(owner, name, getattr(spec, name), "an integer >= 1")
    if spec.n_heads % spec.n_kv_heads != 0:
        raise ParameterError(
            f"{owner}: n_kv_heads={spec.n_kv_heads} is invalid; allowed: a divisor of n_heads={spec.n_heads}"
        )
    if spec.value_dim is not None:
        _check_shape_field(owner, "value_dim", spec.value_dim, "None (head_dim) or an integer >= 1")
    if spec.layer_shapes is not None:
        _check_layer_shapes(owner, spec)
    if spec.rope_frequencies is not None:
        _check_frequencies(owner, spec)
    if spec.rope_base is not None:
        _check_rope_base(owner, spec.rope_base)


def _check_rope_base(owner: str, base: object) -> None:
    """A base whose frequencies are not finite moves a kept key to NaN: a NumericsError mid-decode otherwise."""
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 0 < base < math.inf:
        raise ParameterError(
            f"{owner}: rope_base={base!r} is invalid; allowed: None (positions that are not rotary) or a finite number "
            "> 0, the base of the rotary frequencies base^(-2i/head_dim) (10000.0 for Llama 2)"
        )


def _check_frequencies(owner: str, spec: ModelSpec | CacheSpec) -> None:
    freqs, dims = spec.rope_frequencies, [_head_dim(spec, layer) for layer in range(spec.n_layers)]
    if isinstance(freqs, tuple) and len(freqs) == spec.n_layers and all(_is_freq(f, d) for f, d in zip(freqs, dims)):
        return
    raise ParameterError(
        f"{owner}: rope_frequencies={freqs!r} is invalid; allowed: None (rope_base's) or n_layers={spec.n_layers} "
        "tuples of floats >= 0, each at most half its layer's head_dim long (() for a layer whose keys carry no "
        "position)"
    )


def _head_dim(spec: ModelSpec | CacheSpec, layer: int) -> int:
    return spec.head_dim if spec.layer_shapes is None else spec.layer_shapes[layer][1]


def _is_freq(freq: object, head_dim: int) -> bool:
    if not isinstance(freq, tuple) or len(freq) > head_dim // 2:  # (): keys that carry no position (NoPE)
        return False
    return all(isinstance(f, float) and f >= 0 for f in freq)


def _check_layer_shapes(owner: str, spec: ModelSpec | CacheSpec) -> None:
    shapes = spec.layer_shapes
    if isinstance(shapes, tuple) and len(shapes) == spec.n_layers and all(_is_shape(s, spec.n_heads) for s in shapes):
        return
    raise ParameterError(
        f"{owner}: layer_shapes={shapes!r} is invalid; allowed: None (every layer as n_kv_heads, head_dim and "
        f"value_dim say) or n_layers={spec.n_layers} (kv-heads, head_dim, value width) tuples of integers >= 1, each "
        f"kv-heads a divisor of n_heads={spec.n_heads}"
    )


def _is_shape(shape: object, n_heads: int) -> bool:
    if not isinstance(shape, tuple) or len(shape) != 3:
        return False
    return all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in shape) and n_heads % shape[0] == 0


def _check_shape_field(owner: str, name: str, value: object, allowed: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ParameterError(f"{owner}: {name}={value!r} is invalid; allowed: {allowed}")


_HEADS = ("n_layers", "n_heads", "n_kv_heads", "head_dim")
# What a cache takes from its model's spec.
_FROM_MODEL = (
    *_HEADS,
    "value_dim",
    "layer_shapes",
    "rope_base",
    "rope_frequencies",
    "max_positions",
    "attention_windows",
    "calibration",
)


class _Rotary:
    """What both specs say of how a model's keys rotate (`rope_base`, `rope_frequencies`)."""

    rope_base: float | None
    rope_frequencies: tuple[tuple[float, ...], ...] | None

    @property
    def movable_keys(self) -> bool:
        """Whether a cache may move a key it keeps to another position (`decodekit.rope.rotate`): the model's
        rotary frequencies are known."""
        return self.rope_base is not None or self.rope_frequencies is not None


@dataclass(frozen=True)
class ModelSpec(_Rotary):
    """What the decode loop and the cache backends need to know about a model. `rope_base`, `rope_frequencies`,
    `attention_windows` and `calibration` pass to its caches (docs/caches.md, `CacheSpec`); `rope_note`: why both
    rotary fields are None when that is not absolute positions (e.g. "its rotary scaling 'dynamic' changes its
    frequencies with the sequence length"), so an error says what is true; `value_dim`: the width of the values the
    model caches where it is not `head_dim` (DeepSeek's latent attention caches latents of `kv_lora_rank` and rotary
    keys of `qk_rope_head_dim`), None: `head_dim`; `layer_shapes`: where layers cache other shapes (Gemma 4's
    full-attention layers wider keys, MiMo-V2-Flash's sliding layers more kv-heads), each layer's `(kv-heads,
    head_dim, value width)`, which then rule over the three scalar fields; None: every layer as they say;
    `rope_frequencies`: where keys rotate by other frequencies than `rope_base`'s (scaled, partial, per layer type),
    each layer's inverse frequencies (`decodekit.rope`), which rule over `rope_base` (`()`: a layer without positional
    encoding, whose keys any cache may move); `splittable`: False where a
    prompt fed in several forwards gets other logits than from one forward over it (transformers' `longrope` picks
    its frequencies by a forward's largest position; Llama 4's query temperature counts cache slots, which a shared
    prefix's forward moves): the engine then prefills each prompt in one forward, sharing no prefix (docs/concepts.md,
    "The decode engine")."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    max_positions: int
    rope_base: float | None = None
    attention_windows: tuple[int, ...] | None = None
    calibration: Path | None = None
    rope_note: str | None = None
    value_dim: int | None = None
    layer_shapes: tuple[tuple[int, int, int], ...] | None = None
    rope_frequencies: tuple[tuple[float, ...], ...] | None = None
    splittable: bool = True

    def __post_init__(self) -> None:
        _check_shape("ModelSpec", self, (*_HEADS, "vocab_size", "max_positions"))
        if not isinstance(self.splittable, bool):
            raise ParameterError(f"ModelSpec: splittable={self.splittable!r} is invalid; allowed: True or False")


@dataclass(frozen=True)
class CacheSpec(_Rotary):
    """Everything a cache backend needs to preallocate its buffers, and to move or drop keys; the fields after
    `device` come from the model (`for_model`). docs/caches.md (`CacheSpec`) says what each field is."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    batch_size: int
    capacity: int
    dtype: torch.dtype = torch.float32
    device: torch.device | str = "cpu"
    rope_base: float | None = None
    max_positions: int | None = None
    attention_windows: tuple[int, ...] | None = None
    calibration: Path | None = None
    value_dim: int | None = None
    layer_shapes: tuple[tuple[int, int, int], ...] | None = None
    rope_frequencies: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        _check_shape("CacheSpec", self, (*_HEADS, "batch_size", "capacity"))
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ParameterError(f"CacheSpec: dtype={self.dtype!r} is invalid; allowed: a floating torch.dtype")

    @property
    def value_width(self) -> int:
        """The width of a stored value: `value_dim`, or `head_dim` where it is None."""
        return self.head_dim if self.value_dim is None else self.value_dim

    def layer_shape(self, layer: int) -> tuple[int, int, int]:
        """`(kv-heads, head_dim, value width)` of what `layer` caches: `layer_shapes[layer]`, else the scalars'."""
        if self.layer_shapes is None:
            return self.n_kv_heads, self.head_dim, self.value_width
        return self.layer_shapes[layer]

    def frequencies(self, layer: int) -> Tensor | None:
        """`layer`'s rotary inverse frequencies (float64, on `device`: `decodekit.rope.rotate` moves its keys by them):
        `rope_frequencies[layer]`, else `rope_base`'s over its whole head_dim; None: its keys cannot move."""
        if self.rope_frequencies is not None:
            return torch.tensor(self.rope_frequencies[layer], dtype=torch.float64, device=self.device)
        return None if self.rope_base is None else frequencies(self.layer_shape(layer)[1], self.rope_base, self.device)

    @classmethod
    def for_model(
        cls,
        spec: ModelSpec,
        *,
        batch_size: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> CacheSpec:
        """The cache shape that serves `spec` for `batch_size` rows of up to `capacity` tokens."""
        shared = {name: getattr(spec, name) for name in _FROM_MODEL}
        return cls(**shared, batch_size=batch_size, capacity=capacity, dtype=dtype, device=device)

"""Shapes of models and caches: `ModelSpec` and `CacheSpec`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from decodekit.errors import ParameterError

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
_FROM_MODEL = (*_HEADS, "value_dim", "layer_shapes", "rope_base", "max_positions", "attention_windows", "calibration")


@dataclass(frozen=True)
class ModelSpec:
    """What the decode loop and the cache backends need to know about a model. `rope_base`, `attention_windows`
    and `calibration` pass to its caches (docs/caches.md, `CacheSpec`); `rope_note`: why `rope_base` is None when
    that is not absolute positions (e.g. "its rotary scaling 'llama3' is not supported for re-rotating kept
    keys"), so an error says what is true; `value_dim`: the width of the values the model caches where it is not
    `head_dim` (DeepSeek's latent attention caches latents of `kv_lora_rank` and rotary keys of `qk_rope_head_dim`),
    None: `head_dim`; `layer_shapes`: where layers cache other shapes (Gemma 4's full-attention layers wider keys,
    MiMo-V2-Flash's sliding layers more kv-heads), each layer's `(kv-heads, head_dim, value width)`, which then
    rule over the three scalar fields; None: every layer as they say."""

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

    def __post_init__(self) -> None:
        _check_shape("ModelSpec", self, (*_HEADS, "vocab_size", "max_positions"))


@dataclass(frozen=True)
class CacheSpec:
    """Everything a cache backend needs to preallocate its buffers, and to move or drop keys; the last five
    come from the model (`for_model`). docs/caches.md (`CacheSpec`) says what each field is."""

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

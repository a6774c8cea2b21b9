"""Each layer's window size from `WindowParams.size`: a number, one per layer, or "auto"."""

from __future__ import annotations

from decodekit.errors import ParameterError
from decodekit.spec import CacheSpec
from decodekit_cache_window.params import WindowParams

__all__ = ["layer_sizes"]


def layer_sizes(params: WindowParams, spec: CacheSpec) -> list[int]:
    """One size per layer, checked against the model: a query never reaches past its trained context."""
    L = spec.n_layers
    if params.size == "auto":
        if spec.attention_windows is None:
            raise ParameterError(
                "window: size='auto' is invalid for this model: it ships no calibration (ModelSpec.attention_windows "
                "is None); allowed: a number or one per layer, or calibrate it (decodekit cache calibrate --model NAME)"
            )
        sizes = list(spec.attention_windows)
    elif isinstance(params.size, int):
        sizes = [params.size] * L
    else:
        sizes = list(params.size)
    if len(sizes) != L:
        raise ParameterError(f"window: size={params.size!r} is invalid; allowed: one size per layer ({L} layers)")
    for layer, size in enumerate(sizes):
        if size < 1:
            raise ParameterError(f"window: size={params.size!r} is invalid at layer {layer}; allowed: sizes >= 1")
        top = spec.max_positions
        if top is not None and spec.rope_base is not None and size + params.sinks > top:
            raise ParameterError(
                f"window: size={size} (layer {layer}) + sinks={params.sinks} is invalid: queries would reach "
                f"{size + params.sinks} positions back, past the model's context; allowed: size + sinks <= {top}"
            )
    return sizes

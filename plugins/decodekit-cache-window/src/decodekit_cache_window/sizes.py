"""Each layer's window size from `WindowParams.size`: a number, one per layer, or "auto"."""

from __future__ import annotations

from decodekit.errors import ParameterError
from decodekit.param_types import words
from decodekit.spec import CacheSpec
from decodekit.storage import check_memory, float_bytes
from decodekit_cache_window.params import WindowParams

__all__ = ["auto_sizes", "layer_sizes"]


def auto_sizes(spec: CacheSpec) -> list[int]:
    """The model's calibrated D_f per layer: `spec.attention_windows`, else its calibration file, read now."""
    if spec.attention_windows is not None:
        return list(spec.attention_windows)
    if spec.calibration is None:
        raise ParameterError(
            "cache window: size='auto' is invalid for this model: it ships no calibration (ModelSpec.attention_windows "
            f"is None); allowed: a number or one per layer{_calibrate_words(spec)}"
        )
    from decodekit_cache_window.calibration import Calibration  # reads the file only when "auto" needs it

    windows = list(Calibration.load(spec.calibration).attention_windows)
    if len(windows) != spec.n_layers:
        raise ParameterError(
            f"calibration file {spec.calibration}: {len(windows)} layers, but the model has {spec.n_layers}; "
            "allowed: the calibration of this model (decodekit cache calibrate --json)"
        )
    return windows


def _calibrate_words(spec: CacheSpec) -> str:
    """How to calibrate: the command line's models are registered by name; Python's may be built in code."""
    if not spec.movable_keys:  # calibrate refuses it: its windows could never move past the context
        return " (only a rotary model calibrates, and this one states no rotary embedding: ModelSpec.rope_base)"
    # Only the hf: and tiny-shakespeare loaders read a calibration.json beside the weights: another loader is told
    # where its path goes.
    command = (
        "decodekit cache calibrate --model NAME --json > calibration.json; an hf: model reads it beside its weights, "
        "a model loader of your own passes its path as ModelSpec(calibration=...)"
    )
    context = spec.max_positions or "max_positions"
    python = (
        "in its ModelSpec, attention_windows=decodekit_cache_window.calibration.calibrate(model, ids)"
        f".attention_windows, ids at least {context} token ids of text; a registered model: {command}"
    )
    return f", or calibrate it ({words(python, command)})"


def layer_sizes(params: WindowParams, spec: CacheSpec) -> list[int]:
    """One size per layer, checked against the model (a query never reaches past its trained context) and
    against the device's memory, before anything is allocated. A window wider than the context is refused only
    where the text can pass the context: a query reaches no further than the `spec.capacity` slots fed."""
    L = spec.n_layers
    if params.size == "auto":
        sizes = auto_sizes(spec)
    elif isinstance(params.size, int):
        sizes = [params.size] * L
    else:
        sizes = list(params.size)
    if len(sizes) != L:
        raise ParameterError(f"cache window: size={params.size!r} is invalid; allowed: one size per layer ({L} layers)")
    for layer, size in enumerate(sizes):
        if size < 1:
            raise ParameterError(f"cache window: size={params.size!r} is invalid at layer {layer}; allowed: sizes >= 1")
        top = spec.max_positions
        if top is not None and spec.movable_keys and min(size + params.sinks, spec.capacity) > top:
            raise ParameterError(
                f"cache window: size={size} (layer {layer}) + sinks={params.sinks} is invalid: queries would reach "
                f"{size + params.sinks} positions back, past the model's context; allowed: size + sinks <= {top}"
            )
    slots = [params.sinks + size + params.slack - 1 for size in sizes]
    what = f"size={params.size!r}, sinks={params.sinks}, slack={params.slack}"
    check_memory("cache window", what, float_bytes(spec, slots), spec.device)
    return sizes

"""A model left in training mode, warned about: a module starts in it, and its dropout then draws anew in every
forward, greedy decoding included (docs/concepts.md, "Models")."""

from __future__ import annotations

import sys
import warnings

from torch import nn
from torch.nn.modules.dropout import _DropoutNd

from decodekit.by_identity import ByIdentity
from decodekit.errors import TrainingModeWarning

__all__ = ["warn_if_training"]


_dropouts: ByIdentity[tuple[_DropoutNd, ...]] = ByIdentity()  # found once per model: a walk costs ~1 µs a module


def warn_if_training(model: object) -> None:
    """Warn where `model` has a dropout layer (`p > 0`) in training mode; only its mode is read per request."""
    if not isinstance(model, nn.Module):
        return
    layers = _dropouts.get(model)
    if layers is None:
        layers = tuple(m for m in model.modules() if isinstance(m, _DropoutNd) and m.p > 0)
        _dropouts.put(model, layers)
    if any(layer.training for layer in layers):
        name = type(model).__name__
        warnings.warn(
            TrainingModeWarning(
                f"decodekit: model {name} is in training mode: its dropout draws anew in every forward, greedy "
                "decoding included; model.eval() turns it off"
            ),
            stacklevel=_callers_level(),
        )


def _callers_level() -> int:
    """The `stacklevel` of the first frame outside decodekit and its plugins: the line that asked to decode."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("decodekit"):
        frame, level = frame.f_back, level + 1
    return level

"""decodekit-repetition-penalty: the `repetition_penalty` processor (CTRL, HF sign rule).

`RepetitionPenalty` loads on first use so that importing the plugin (for `decodekit plugins`) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from decodekit_repetition_penalty.params import RepetitionPenaltyParams

if TYPE_CHECKING:
    from decodekit_repetition_penalty.repetition_penalty import RepetitionPenalty

__all__ = ["RepetitionPenalty", "RepetitionPenaltyParams"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "RepetitionPenalty":
        return importlib.import_module("decodekit_repetition_penalty.repetition_penalty").RepetitionPenalty
    raise AttributeError(f"module 'decodekit_repetition_penalty' has no attribute {name!r}")

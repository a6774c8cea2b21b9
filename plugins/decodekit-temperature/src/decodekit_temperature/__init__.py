"""decodekit-temperature: the `temperature` processor (logits / T; T = 0 is greedy).

`Temperature` loads on first use so that importing the plugin (for `decodekit plugins`) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from decodekit_temperature.params import TemperatureParams

if TYPE_CHECKING:
    from decodekit_temperature.temperature import Temperature

__all__ = ["Temperature", "TemperatureParams"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Temperature":
        return importlib.import_module("decodekit_temperature.temperature").Temperature
    raise AttributeError(f"module 'decodekit_temperature' has no attribute {name!r}")

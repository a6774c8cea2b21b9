"""Parameters of `temperature`."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["TemperatureParams"]


class TemperatureParams(Params):
    value: float = Field(ge=0, allow_inf_nan=False, description="the temperature T; 0 keeps only the argmax")

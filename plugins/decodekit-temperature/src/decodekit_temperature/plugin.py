"""Registers `temperature`; imports no torch (the implementation loads on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_temperature.params import TemperatureParams


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "temperature",
        "decodekit_temperature.temperature:Temperature",
        TemperatureParams,
        "Divide the logits by T (T = 0: keep only the argmax)",
    )

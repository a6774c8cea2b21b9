"""Registers the watermark; imports no torch (the implementation loads on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_watermark.params import WatermarkParams


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "watermark",
        "decodekit_watermark.stage:Watermark",
        WatermarkParams,
        "Add a bias to a green share of the vocabulary seeded by the tokens before (transformers' watermark)",
    )

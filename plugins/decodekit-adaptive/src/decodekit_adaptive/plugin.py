"""Registers the adaptive samplers; imports no torch (implementations load on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_adaptive.params import (
    AdaptivePParams,
    DynamicTemperatureParams,
    GumbelParams,
    MirostatParams,
    MirostatV2Params,
)


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "dynamic_temperature",
        "decodekit_adaptive.dynamic_temperature:DynamicTemperature",
        DynamicTemperatureParams,
        "Temperature scaled by the normalised entropy, within [max(0, temp - delta), temp + delta] "
        "(llama.cpp temp_ext)",
    )
    register(
        "mirostat",
        "decodekit_adaptive.mirostat:Mirostat",
        MirostatParams,
        "Mirostat (v1): keep a top-k sized from the estimated Zipf exponent and mu, sample, steer mu towards tau",
        kind="selector",
    )
    register(
        "mirostat_v2",
        "decodekit_adaptive.mirostat_v2:MirostatV2",
        MirostatV2Params,
        "Mirostat v2: truncate by surprise > mu, sample, steer mu towards the target surprise tau",
        kind="selector",
    )
    register(
        "adaptive_p",
        "decodekit_adaptive.adaptive_p:AdaptiveP",
        AdaptivePParams,
        "Adaptive-p: reshape around a target probability adapted to the recent picks, sample (llama.cpp adaptive_p)",
        kind="selector",
    )
    register(
        "gumbel",
        "decodekit_adaptive.gumbel:Gumbel",
        GumbelParams,
        "Gumbel-max: argmax(logits + Gumbel noise) with per-row generators; distributed as sample",
        kind="selector",
    )

"""Parameter models of the adaptive samplers; bounds as the reference implementations use them."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import NoParams, Params

__all__ = ["AdaptivePParams", "DynamicTemperatureParams", "GumbelParams", "MirostatParams", "MirostatV2Params"]


class DynamicTemperatureParams(Params):
    # Bounded as `temperature` is (a temperature below 1e-5 is greedy there and here).
    temp: float = Field(
        ge=0, le=1e4, allow_inf_nan=False, description="centre of the temperature range (0 with delta 0: greedy)"
    )
    delta: float = Field(
        ge=0,
        le=1e4,
        allow_inf_nan=False,
        description="the temperature ranges over [max(0, temp - delta), temp + delta]",
    )
    exponent: float = Field(
        default=1.0,
        ge=0,
        allow_inf_nan=False,
        description="temperature = low + (high - low) * normalised_entropy ** exponent",
    )


class MirostatParams(Params):
    tau: float = Field(
        default=5.0, ge=0, le=1e4, allow_inf_nan=False, description="target surprise in bits; mu starts at 2 * tau"
    )
    eta: float = Field(default=0.1, ge=0, le=1, allow_inf_nan=False, description="learning rate of mu")
    m: int = Field(
        default=100, ge=2, description="the Zipf exponent is estimated from the m most probable tokens (llama.cpp: 100)"
    )


class MirostatV2Params(Params):
    tau: float = Field(
        default=5.0, ge=0, le=1e4, allow_inf_nan=False, description="target surprise in bits; mu starts at 2 * tau"
    )
    eta: float = Field(default=0.1, ge=0, le=1, allow_inf_nan=False, description="learning rate of mu")


class AdaptivePParams(Params):
    # Bounded as llama.cpp uses them: it clamps a decay past 0.99 (history ~ 1 / (1 - decay) tokens) and reads a
    # target past 1 as 1 (but starts its average there), so here those are refused.
    target: float = Field(
        le=1,
        allow_inf_nan=False,
        description="the probability the sampled tokens aim at, on average (negative: off, plain sampling)",
    )
    decay: float = Field(
        default=0.9, ge=0, le=0.99, allow_inf_nan=False, description="decay of the sampled probabilities' average"
    )


class GumbelParams(NoParams):
    """Gumbel-max takes no parameters."""

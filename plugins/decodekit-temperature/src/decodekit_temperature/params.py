"""Parameters of `temperature`."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["GREEDY_BELOW", "TemperatureParams"]

GREEDY_BELOW = 1e-5
"""A temperature below this is greedy (vLLM's sampler's rule; vLLM's SamplingParams first raises 0 < T < 0.01
to 0.01, so there only 0 is): dividing by it would overflow any logit above ~3e33, and it underflows half
precision's range."""


class TemperatureParams(Params):
    value: float = Field(
        ge=0, le=1e4, allow_inf_nan=False, description="the temperature T; below 1e-5 (0 too) keeps only the argmax"
    )

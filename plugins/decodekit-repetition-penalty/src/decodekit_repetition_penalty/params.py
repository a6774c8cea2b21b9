"""Parameters of `repetition_penalty`."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["RepetitionPenaltyParams"]


class RepetitionPenaltyParams(Params):
    penalty: float = Field(
        gt=0, allow_inf_nan=False, description="positive logits are divided by it, negative ones multiplied; 1: no-op"
    )
    last_n: int | None = Field(None, ge=1, description="only the last n tokens of the context count; None: all")
    include_prompt: bool = Field(True, description="False: only the generated tokens count")

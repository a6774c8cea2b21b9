"""Parameters of `repetition_penalty`."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["RepetitionPenaltyParams"]


class RepetitionPenaltyParams(Params):
    # Bounded so that the penalty, and 1 / penalty, are normal numbers in every float dtype's
    # range that logits come in (float16's smallest normal is 6.1e-5).
    penalty: float = Field(
        ge=1e-4,
        le=1e4,
        allow_inf_nan=False,
        description="positive logits are divided by it, negative ones multiplied; 1: no-op",
    )
    last_n: int | None = Field(default=None, ge=1, description="only the last n tokens of the context count; None: all")
    include_prompt: bool = Field(default=True, description="False: only the generated tokens count")

"""The parameter model of the beam strategy (pydantic only, so listing strategies imports no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decodekit.params import Params

__all__ = ["BeamParams", "EarlyStopping"]

EarlyStopping = bool | Literal["never"]


class BeamParams(Params):
    """The options of beam search besides those every strategy shares."""

    num_beams: int = Field(default=4, ge=1, description="continuations kept per prompt")
    length_penalty: float = Field(
        default=1.0, ge=-10.0, le=10.0, description="finished hypotheses score sum_logprobs / length ** length_penalty"
    )
    early_stopping: EarlyStopping = Field(default=False, description="True, False (HF's heuristic) or 'never'")
    num_return_sequences: int = Field(default=1, ge=1, description="hypotheses returned per prompt, <= num_beams")

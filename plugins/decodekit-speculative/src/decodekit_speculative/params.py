"""The strategy's parameters: bounds declared once, so the error message cannot drift from the check."""

from __future__ import annotations

from pydantic import Field

from decodekit.param_types import ModelObject
from decodekit.params import Params

__all__ = ["NGRAM", "SpeculativeParams"]

NGRAM = "ngram"
"""The `draft` value for prompt lookup: no draft model, the history's own earlier continuation."""


class SpeculativeParams(Params):
    draft: str | ModelObject = Field(
        NGRAM, description='a registered model name, a model object, or "ngram" (prompt lookup, the default)'
    )
    k: int = Field(4, ge=1, le=64, description="tokens the draft proposes per step")
    ngram_size: int = Field(3, ge=1, le=64, description='"ngram": length of the suffix looked up in the history')

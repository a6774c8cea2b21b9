"""The strategy's parameters: bounds declared once, so the error message cannot drift from the check."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from decodekit.params import Params

__all__ = ["NGRAM", "SpeculativeParams"]

NGRAM = "ngram"
"""The `draft` value for prompt lookup: no draft model, the history's own earlier continuation."""


class SpeculativeParams(Params):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    draft: Any = Field(description='a registered model name, a model object, or "ngram" (prompt lookup)')
    k: int = Field(4, ge=1, le=64, description="tokens the draft proposes per step")
    ngram_size: int = Field(3, ge=1, le=64, description='"ngram": length of the suffix looked up in the history')

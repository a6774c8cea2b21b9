"""Parameters of `top_p`."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["TopPParams"]


class TopPParams(Params):
    p: float = Field(gt=0, le=1, allow_inf_nan=False, description="probability mass to keep; 1 keeps everything")
    min_keep: int = Field(default=1, ge=1, description="keep at least this many tokens")

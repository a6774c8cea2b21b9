"""Parameters of `top_k`."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["TopKParams"]


class TopKParams(Params):
    k: int = Field(ge=1, description="number of highest logits to keep (ties at the k-th are kept too)")

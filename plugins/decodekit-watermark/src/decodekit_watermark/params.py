"""The watermark's parameters, as transformers' `WatermarkingConfig` names and bounds them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decodekit.params import Params

__all__ = ["WatermarkParams"]


class WatermarkParams(Params):
    bias: float = Field(
        default=2.0, ge=-1e4, le=1e4, allow_inf_nan=False, description="added to the green tokens' logits"
    )
    greenlist_ratio: float = Field(
        default=0.25, gt=0, lt=1, allow_inf_nan=False, description="the share of the vocabulary that is green"
    )
    hashing_key: int = Field(  # negative ones too, as transformers seeds torch's generator with them
        default=15485863, ge=-(2**63), lt=2**63, description="the secret key the green lists are drawn from"
    )
    seeding_scheme: Literal["lefthash", "selfhash"] = Field(
        default="lefthash",
        description="lefthash: the green list follows the token before; selfhash: the candidate token too",
    )
    context_width: int = Field(
        default=1, ge=1, le=1024, description="tokens before the next one that seed its green list (selfhash)"
    )

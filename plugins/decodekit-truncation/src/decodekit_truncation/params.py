"""Parameter models of the truncation samplers; bounds as the reference implementations use them.

The main parameter comes first, so `Chain.parse("min_p(0.05)")` fills it by position.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from decodekit.params import Params

__all__ = [
    "EpsilonParams",
    "EtaParams",
    "MinPParams",
    "TopAParams",
    "TopHParams",
    "TopNSigmaParams",
    "TypicalParams",
    "XTCParams",
]

_MIN_KEEP = "keep at least this many of the most probable tokens"


class MinPParams(Params):
    p: float = Field(
        ge=0, le=1, allow_inf_nan=False, description="keep tokens with probability >= p * p_max (0: no-op)"
    )
    min_keep: int = Field(default=1, ge=1, description=_MIN_KEEP)


class TypicalParams(Params):
    mass: float = Field(
        default=0.9,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="probability mass of the most typical tokens to keep (1: no-op)",
    )
    min_keep: int = Field(default=1, ge=1, description=_MIN_KEEP)


class EpsilonParams(Params):
    epsilon: float = Field(gt=0, lt=1, allow_inf_nan=False, description="remove tokens with probability < epsilon")
    min_keep: int = Field(default=1, ge=1, description=_MIN_KEEP)


class EtaParams(Params):
    epsilon: float = Field(
        gt=0, lt=1, allow_inf_nan=False, description="eta = min(epsilon, sqrt(epsilon) * exp(-entropy))"
    )
    min_keep: int = Field(default=1, ge=1, description=_MIN_KEEP)


class TopNSigmaParams(Params):
    n: float = Field(ge=0, allow_inf_nan=False, description="keep logits >= max - n * std (0: no-op, as in llama.cpp)")


class TopAParams(Params):
    a: float = Field(
        ge=0, le=1, allow_inf_nan=False, description="keep tokens with probability >= a * p_max**2 (0: no-op)"
    )
    min_keep: int = Field(default=1, ge=1, description=_MIN_KEEP)


class TopHParams(Params):
    h: float = Field(
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="keep the most probable tokens while their entropy terms sum to <= h * the top_n entropy",
    )
    # the cut pads the top logits to top_n floats per row: 2**20 is past any vocabulary, and bounds that padding
    top_n: int = Field(
        default=100, ge=1, le=2**20, description="the candidates: the top_n most probable tokens (transformers: 100)"
    )


class XTCParams(Params):
    probability: float = Field(ge=0, le=1, allow_inf_nan=False, description="chance per row and step that XTC applies")
    threshold: float = Field(
        default=0.1,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="tokens with probability >= threshold are the top choices (> 0.5: no-op)",
    )
    min_keep: int = Field(default=1, ge=1, description="apply only if at least this many tokens remain")
    special_tokens: tuple[Annotated[int, Field(ge=0, lt=2**63)], ...] = Field(
        default=(), description="token ids XTC never removes (mlx-lm's xtc_special_tokens: its newline and eos ids)"
    )

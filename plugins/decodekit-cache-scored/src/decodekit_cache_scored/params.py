"""The scored caches' parameters (pydantic only: cheap to import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from decodekit.params import Params

__all__ = ["ScoredParams", "SnapKVParams"]


class ScoredParams(Params):
    """budget: entries each row and kv-head keeps per layer, or compression: the fraction of the model's
    context to drop (budget = ⌊(1 − compression) · context⌋; 0.5 when neither is given); sinks: the first
    tokens, always kept; recent: the latest tokens, always kept; slack: tokens one update may add before the
    held set is compressed as a whole, and crop may take back; store: the storage backend; prefill_only: compress
    the prompt (the first forward) only and keep every later token, as kvpress does."""

    budget: int | None = Field(default=None, ge=1, description="entries kept per layer, row and kv-head (tokens)")
    compression: float | None = Field(
        default=None, ge=0, lt=1, description="fraction of the model's context dropped (default 0.5 without budget)"
    )
    sinks: int = Field(default=4, ge=0, description="first tokens always kept (attention sinks)")
    recent: int = Field(default=8, ge=0, description="latest tokens always kept")
    slack: int = Field(default=8, ge=1, description="tokens an update may add, and crop take back, before compressing")
    store: str = Field(default="gqa", min_length=1, description="storage backend of the kept tokens (gqa, int8, ...)")
    prefill_only: bool = Field(
        default=False, description="compress the prompt only, keep every later token (kvpress's prefill compression)"
    )

    @model_validator(mode="after")
    def _one_budget(self) -> ScoredParams:
        if self.budget is not None and self.compression is not None:
            raise ValueError("give budget (tokens) or compression (a ratio), not both")
        if self.budget is not None and self.budget < self.sinks + self.recent:
            raise ValueError(
                "budget must hold the sinks and the recent tokens: budget >= sinks + recent "
                f"({self.budget} < {self.sinks} + {self.recent})"
            )
        return self


class SnapKVParams(ScoredParams):
    """SnapKV (Li et al. 2024): a prompt is compressed by the attention its last `window` queries pay to the
    rest, pooled over `kernel` neighbours; later tokens are evicted by the `decode` rule."""

    window: int = Field(default=16, ge=1, description="the prompt's last queries that score the rest (kept)")
    kernel: int = Field(default=5, ge=1, description="width of the average pooling of the scores (odd)")
    decode: Literal["h2o", "tova", "knorm"] = Field(default="h2o", description="the eviction rule after the prompt")

    @model_validator(mode="after")
    def _odd_kernel(self) -> SnapKVParams:
        if self.kernel % 2 == 0:
            raise ValueError("kernel must be odd (the pooling keeps one score per key)")
        return self

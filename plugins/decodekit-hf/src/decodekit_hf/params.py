"""`HFParams`: the `hf` loader's parameters, `hf(dtype=bfloat16, device=cuda, context=2048):/path` (no torch here:
`decodekit plugins` lists them without loading it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decodekit.params import Params

__all__ = ["DTYPES", "HFParams"]

DTYPES = ("auto", "float32", "bfloat16", "float16")


class HFParams(Params):
    """How `hf` loads a checkpoint: the weights' dtype, the device they sit on, and the context the decode loop
    allows. Whether torch can use the device is checked when the model loads (`decodekit_hf.placement`)."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="weights' dtype; auto: the config's dtype, else the checkpoint's (transformers 5)"
    )
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|cuda(:\d+)?|mps)$",
        description="where the weights sit",
        json_schema_extra={"allowed": "cpu, cuda, cuda:N (N = 0, 1, ...), mps"},
    )
    context: int | None = Field(
        default=None, ge=1, description="the context length; None: the config's (required where the config has none)"
    )

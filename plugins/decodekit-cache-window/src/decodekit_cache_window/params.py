"""`WindowParams`: the `window` backend's parameters (pydantic only: cheap to import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decodekit.params import Params

__all__ = ["WindowParams"]


class WindowParams(Params):
    """size: recent tokens each query sees, itself included (one number, one per layer, or "auto":
    the model's calibrated D_f per layer); sinks: the first tokens, always kept (StreamingLLM);
    slack: tokens one update may add, and crop may take back, beyond the window; store: the
    storage backend the kept keys and values live in (gqa, int8, or any backend with a storage)."""

    size: int | list[int] | Literal["auto"] = Field(
        default="auto", description='recent tokens each query sees: n, one per layer, or "auto" (calibrated D_f)'
    )
    sinks: int = Field(default=4, ge=0, description="first tokens always kept (attention sinks)")
    slack: int = Field(default=16, ge=1, description="tokens an update may add, and crop take back, past the window")
    store: str = Field(default="gqa", min_length=1, description="storage backend of the kept tokens (gqa, int8, ...)")

"""decodekit-top-k: the `top_k` processor (keep the k largest logits, ties at the k-th kept).

`TopK` loads on first use so that importing the plugin (for `decodekit plugins`) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from decodekit_top_k.params import TopKParams

if TYPE_CHECKING:
    from decodekit_top_k.top_k import TopK

__all__ = ["TopK", "TopKParams"]
__version__ = "0.1.0"

_LAZY = {"TopK": "decodekit_top_k.top_k"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'decodekit_top_k' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

"""decodekit-top-p: the `top_p` (nucleus) processor.

`TopP` loads on first use so that importing the plugin (for `decodekit plugins`) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from decodekit_top_p.params import TopPParams

if TYPE_CHECKING:
    from decodekit_top_p.top_p import TopP

__all__ = ["TopP", "TopPParams"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "TopP":
        return importlib.import_module("decodekit_top_p.top_p").TopP
    raise AttributeError(f"module 'decodekit_top_p' has no attribute {name!r}")

"""decodekit-greedy: the `greedy` selector (argmax, the lowest token id on ties).

`Greedy` loads on first use so that importing the plugin (for `decodekit plugins`) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_greedy.greedy import Greedy

__all__ = ["Greedy"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Greedy":
        return importlib.import_module("decodekit_greedy.greedy").Greedy
    raise AttributeError(f"module 'decodekit_greedy' has no attribute {name!r}")

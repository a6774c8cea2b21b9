"""The `dense` cache backend for decodekit.

The entry point imports `plugin`, which imports no torch; `DenseCache` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_cache_dense.cache import DenseCache

__all__ = ["DenseCache"]


def __getattr__(name: str) -> Any:
    if name == "DenseCache":
        from decodekit_cache_dense.cache import DenseCache

        return DenseCache
    raise AttributeError(f"module 'decodekit_cache_dense' has no attribute {name!r}")

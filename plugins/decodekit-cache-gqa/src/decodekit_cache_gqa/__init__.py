"""The `gqa` cache backend for decodekit.

The entry point imports `plugin`, which imports no torch; `GQACache` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_cache_gqa.cache import GQACache

__all__ = ["GQACache"]


def __getattr__(name: str) -> Any:
    if name == "GQACache":
        from decodekit_cache_gqa.cache import GQACache

        return GQACache
    raise AttributeError(f"module 'decodekit_cache_gqa' has no attribute {name!r}")

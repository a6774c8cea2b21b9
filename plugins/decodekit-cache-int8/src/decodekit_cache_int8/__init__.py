"""The `int8` cache backend for decodekit: keys and values in int8, one scale per token and head.

The entry point imports `plugin`, which imports no torch; the classes load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_cache_int8.storage import Int8Cache, Int8Storage

__all__ = ["Int8Cache", "Int8Storage"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from decodekit_cache_int8 import storage

        return getattr(storage, name)
    raise AttributeError(f"module 'decodekit_cache_int8' has no attribute {name!r}")

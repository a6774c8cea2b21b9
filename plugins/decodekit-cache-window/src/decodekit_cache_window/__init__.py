"""The `window` cache backend for decodekit: attention sinks plus the most recent tokens, per layer.

The entry point imports `plugin`, which imports no torch; `WindowCache` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from decodekit_cache_window.params import WindowParams  # pydantic only: cheap

if TYPE_CHECKING:
    from decodekit_cache_window.cache import WindowCache

__all__ = ["WindowCache", "WindowParams"]


def __getattr__(name: str) -> Any:
    if name == "WindowCache":
        from decodekit_cache_window.cache import WindowCache

        return WindowCache
    raise AttributeError(f"module 'decodekit_cache_window' has no attribute {name!r}")

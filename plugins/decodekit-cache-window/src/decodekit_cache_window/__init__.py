"""The `window` cache backend for decodekit: attention sinks plus the most recent tokens, per layer.

The entry point imports `plugin`, which imports no torch; `WindowCache` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_cache_window.cache import WindowCache
    from decodekit_cache_window.params import WindowParams

__all__ = ["WindowCache", "WindowParams"]


def __getattr__(name: str) -> Any:
    if name == "WindowCache":
        from decodekit_cache_window.cache import WindowCache

        return WindowCache
    if name == "WindowParams":
        from decodekit_cache_window.params import WindowParams

        return WindowParams
    raise AttributeError(f"module 'decodekit_cache_window' has no attribute {name!r}")

"""Registers the `window` cache backend (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import CacheRegistrar


@hookimpl
def register_cache_backends(register: CacheRegistrar) -> None:
    register(
        "window",
        "decodekit_cache_window.cache:WindowCache",
        "Attention sinks + the most recent `size` tokens per layer (StreamingLLM); fixed memory, any storage",
    )

"""Registers the `window` cache backend (imports no torch until a cache is created)."""

from decodekit import hookimpl
from decodekit.hookspecs import Registrar
from decodekit_cache_window.params import WindowParams


@hookimpl
def register_cache_backends(register: Registrar) -> None:
    register(
        "window",
        "decodekit_cache_window.cache:WindowCache",
        WindowParams,
        description="Attention sinks + the most recent `size` tokens per layer (StreamingLLM); "
        "fixed memory, any storage",
    )

"""decodekit: a plugin-based sampling framework for autoregressive language models.

``import decodekit`` is light: torch and the heavy modules load on first use of a
name that needs them, so plugin listings and ``decodekit --help`` stay fast.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from decodekit.errors import (
    CacheCapacityError,
    ChainSpecError,
    ContextLengthError,
    DecodekitError,
    NumericsError,
    ParameterError,
    PluginError,
    UnknownNameError,
)
from decodekit.hookspecs import hookimpl
from decodekit.params import NoParams, Params

if TYPE_CHECKING:
    from decodekit.beam import beam_search
    from decodekit.cache import KVCache, PreallocatedKVCache
    from decodekit.chain import Chain, Processor, Selector
    from decodekit.context import DecodeContext
    from decodekit.generate import Generation, TokenEvent, generate, stream
    from decodekit.plugins import (
        create,
        create_cache,
        decode,
        get_registry,
        load_model,
        register_plugin,
        reload_plugins,
        unregister_plugin,
    )
    from decodekit.spec import CacheSpec, ModelSpec
    from decodekit.stage import Candidates, ProcessorBase, SelectorBase, Stage

__version__ = "0.1.0"

_LAZY = {
    "beam_search": "decodekit.beam",
    "KVCache": "decodekit.cache",
    "PreallocatedKVCache": "decodekit.cache",
    "Chain": "decodekit.chain",
    "Processor": "decodekit.chain",
    "Selector": "decodekit.chain",
    "DecodeContext": "decodekit.context",
    "Generation": "decodekit.generate",
    "TokenEvent": "decodekit.generate",
    "generate": "decodekit.generate",
    "stream": "decodekit.generate",
    "create": "decodekit.plugins",
    "create_cache": "decodekit.plugins",
    "decode": "decodekit.plugins",
    "get_registry": "decodekit.plugins",
    "load_model": "decodekit.plugins",
    "register_plugin": "decodekit.plugins",
    "reload_plugins": "decodekit.plugins",
    "unregister_plugin": "decodekit.plugins",
    "CacheSpec": "decodekit.spec",
    "ModelSpec": "decodekit.spec",
    "Candidates": "decodekit.stage",
    "ProcessorBase": "decodekit.stage",
    "SelectorBase": "decodekit.stage",
    "Stage": "decodekit.stage",
}

__all__ = [
    "CacheCapacityError",
    "CacheSpec",
    "Candidates",
    "Chain",
    "ChainSpecError",
    "ContextLengthError",
    "DecodeContext",
    "DecodekitError",
    "Generation",
    "KVCache",
    "ModelSpec",
    "NoParams",
    "NumericsError",
    "ParameterError",
    "Params",
    "PluginError",
    "PreallocatedKVCache",
    "Processor",
    "ProcessorBase",
    "Selector",
    "SelectorBase",
    "Stage",
    "TokenEvent",
    "UnknownNameError",
    "beam_search",
    "create",
    "create_cache",
    "decode",
    "generate",
    "get_registry",
    "hookimpl",
    "load_model",
    "register_plugin",
    "reload_plugins",
    "stream",
    "unregister_plugin",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'decodekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    """Importing a submodule sets it as an attribute of its package, so the first import of
    `decodekit.generate` (by `decodekit.beam`, say) would hide the function `dk.generate` behind
    the module of the same name. Lazy names keep their lazy value."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

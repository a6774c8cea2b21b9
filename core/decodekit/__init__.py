"""decodekit: a plugin-based sampling framework for autoregressive language models.

``import decodekit`` is light: torch and the heavy modules load on first use of a
name that needs them, so plugin listings and ``decodekit --help`` stay fast.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from decodekit.errors import (
    CacheCapacityError,
    ChainSpecError,
    CompileError,
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
    from decodekit.cache import KVCache, PreallocatedKVCache
    from decodekit.chain import Chain, Processor, Selector
    from decodekit.context import DecodeContext
    from decodekit.engine import Decoding
    from decodekit.loop import generate, stream
    from decodekit.model import Model
    from decodekit.plugins import (
        create,
        create_cache,
        get_registry,
        load_model,
        register_plugin,
        reload_plugins,
        unregister_plugin,
    )
    from decodekit.request import DecodeOptions, DecodeRequest
    from decodekit.results import Generation, TokenEvent
    from decodekit.spec import CacheSpec, ModelSpec
    from decodekit.stage import Candidates, ProcessorBase, SelectorBase, Stage
    from decodekit.strategies import decode, validate

__version__ = "0.1.0"

# decodekit needs no NumPy (it is not among its dependencies); torch warns at import when it is missing.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

_LAZY_MODULES = {  # the names that load a module on first use
    "decodekit.cache": ("KVCache", "PreallocatedKVCache"),
    "decodekit.chain": ("Chain", "Processor", "Selector"),
    "decodekit.context": ("DecodeContext",),
    "decodekit.engine": ("Decoding",),
    "decodekit.model": ("Model",),
    "decodekit.request": ("DecodeOptions", "DecodeRequest"),
    "decodekit.results": ("Generation", "TokenEvent"),
    "decodekit.loop": ("generate", "stream"),
    "decodekit.plugins": (
        "create",
        "create_cache",
        "get_registry",
        "load_model",
        "register_plugin",
        "reload_plugins",
        "unregister_plugin",
    ),
    "decodekit.strategies": ("decode", "validate"),
    "decodekit.spec": ("CacheSpec", "ModelSpec"),
    "decodekit.stage": ("Candidates", "ProcessorBase", "SelectorBase", "Stage"),
}
_LAZY = {name: module for module, names in _LAZY_MODULES.items() for name in names}

__all__ = [
    "CacheCapacityError",
    "CacheSpec",
    "Candidates",
    "Chain",
    "ChainSpecError",
    "CompileError",
    "ContextLengthError",
    "DecodeContext",
    "DecodeOptions",
    "DecodeRequest",
    "DecodekitError",
    "Decoding",
    "Generation",
    "KVCache",
    "Model",
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
    "validate",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'decodekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

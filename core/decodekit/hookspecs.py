"""The hooks a decodekit plugin implements. Each has one shape: `register_x(register)`."""

from __future__ import annotations

from typing import Protocol

import pluggy

__all__ = [
    "CacheRegistrar",
    "ModelRegistrar",
    "SamplerRegistrar",
    "StrategyRegistrar",
    "hookimpl",
    "hookspec",
    "register_cache_backends",
    "register_models",
    "register_samplers",
    "register_strategies",
]

hookspec = pluggy.HookspecMarker("decodekit")
hookimpl = pluggy.HookimplMarker("decodekit")


class SamplerRegistrar(Protocol):
    def __call__(
        self, name: str, impl: object, params: object = None, description: str = "", *, kind: str | None = None
    ) -> None:
        """Register one sampler.

        impl: a `ProcessorBase`/`SelectorBase` subclass, a factory `(params) -> stage`,
              or an import path "module:attr" to either (so listing plugins imports no torch).
        params: its pydantic parameter model (a `decodekit.Params`); None for none.
        kind: "processor" or "selector"; inferred from the class when omitted.
        """


class CacheRegistrar(Protocol):
    def __call__(self, name: str, impl: object, description: str = "") -> None:
        """Register one cache backend: `impl(spec: CacheSpec) -> KVCache`, or its import path."""


class ModelRegistrar(Protocol):
    def __call__(self, name: str, loader: object, description: str = "") -> None:
        """Register one model: `loader(argument: str | None) -> model`, or its import path.

        `dk.load_model("name")` calls `loader(None)`; `dk.load_model("name:arg")` calls `loader("arg")`.
        """


@hookspec
def register_samplers(register: SamplerRegistrar) -> None:
    """Register processors and selectors, one `register(...)` call each."""


@hookspec
def register_cache_backends(register: CacheRegistrar) -> None:
    """Register KV-cache backends, one `register(...)` call each."""


@hookspec
def register_models(register: ModelRegistrar) -> None:
    """Register models, one `register(...)` call each."""


class StrategyRegistrar(Protocol):
    def __call__(self, name: str, impl: object, description: str = "") -> None:
        """Register one decode strategy: `impl(model, prompts, **options) -> Generation`, or its import path.

        `dk.decode(model, prompts, strategy="name", **options)` calls it.
        """


@hookspec
def register_strategies(register: StrategyRegistrar) -> None:
    """Register decode strategies (sampling, beam search, ...), one `register(...)` call each."""

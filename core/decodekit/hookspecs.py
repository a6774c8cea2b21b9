"""The hooks a decodekit plugin implements. Each has one shape, `register_x(register)`, and every `register` takes
`register(name, impl, params=None, description="")`, each argument as docs/plugins.md ("The hooks") says; a bad
registration fails its whole hook. What `impl` is called with, per kind, is below."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import pluggy

if TYPE_CHECKING:
    from decodekit.params import Params

__all__ = [
    "CacheRegistrar",
    "ModelRegistrar",
    "Registrar",
    "SamplerRegistrar",
    "StrategyRegistrar",
    "hookimpl",
    "hookspec",
    "register_cache_backends",
    "register_models",
    "register_samplers",
    "register_strategies",
]

ENTRY_POINT_GROUP = "decodekit"  # also pluggy's project name: the markers below and the plugin manager share it
CORE_DISTRIBUTION = "decodekit"
hookspec = pluggy.HookspecMarker(ENTRY_POINT_GROUP)
hookimpl = pluggy.HookimplMarker(ENTRY_POINT_GROUP)


class Registrar(Protocol):
    def __call__(self, name: str, impl: object, params: type[Params] | None = None, description: str = "") -> None:
        """Register one thing (docs/plugins.md, "The hooks")."""


class SamplerRegistrar(Protocol):
    def __call__(
        self,
        name: str,
        impl: object,
        params: type[Params] | None = None,
        description: str = "",
        *,
        kind: str | None = None,
    ) -> None:
        """Register one sampler: `impl(params) -> stage` (a `ProcessorBase`/`SelectorBase` subclass is one); `kind`:
        "processor" (when omitted) or "selector", which a stage class must agree with (checked when it loads)."""


CacheRegistrar = Registrar
"""Cache backends: `impl(spec: CacheSpec, params) -> KVCache`, its parameters validated once (docs/concepts.md,
"KV caches")."""

ModelRegistrar = Registrar
"""Models: `impl(argument: str | None, params) -> model`: `dk.load_model("name", **params)` calls `impl(None, params)`,
`dk.load_model("name:arg")` `impl("arg", params)` (e.g. `"hf:/path/to/checkpoint"`)."""

StrategyRegistrar = Registrar
"""Decode strategies: a policy over the engine, `impl(decoding: decodekit.Decoding, params) -> Iterator[None] | None`
(docs/strategies.md, "Adding a strategy from a plugin")."""


@hookspec
def register_samplers(register: SamplerRegistrar) -> None:
    """Register processors and selectors, one `register(...)` call each."""


@hookspec
def register_cache_backends(register: CacheRegistrar) -> None:
    """Register KV-cache backends, one `register(...)` call each."""


@hookspec
def register_models(register: ModelRegistrar) -> None:
    """Register models, one `register(...)` call each."""


@hookspec
def register_strategies(register: StrategyRegistrar) -> None:
    """Register decode strategies (sampling, beam search, ...), one `register(...)` call each."""

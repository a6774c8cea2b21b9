"""Plugin discovery and the registry of samplers, cache backends and models.

Each entry point of the `decodekit` group is loaded on its own: one that fails is
recorded (distribution, version, error) and the rest keep working, unless
`DECODEKIT_STRICT_PLUGINS=1`. `DECODEKIT_LOAD_PLUGINS=dist-a,dist-b` loads only those
distributions, decided from metadata before anything is imported (empty: none).
The core's own `sample` selector is registered through the same hooks.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pluggy

from decodekit import hookspecs
from decodekit.errors import ParameterError, PluginError, UnknownNameError
from decodekit.params import NoParams, Params, validate_params

if TYPE_CHECKING:
    from decodekit.cache import KVCache
    from decodekit.decoding import Generation
    from decodekit.spec import CacheSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "STANDARD_PLUGINS",
    "CacheEntry",
    "ModelEntry",
    "PluginFailure",
    "PluginInfo",
    "Registry",
    "SamplerEntry",
    "StrategyEntry",
    "create",
    "create_cache",
    "decode",
    "get_registry",
    "load_model",
    "register_plugin",
    "reload_plugins",
    "unregister_plugin",
]

ENTRY_POINT_GROUP = "decodekit"
CORE_DISTRIBUTION = "decodekit"

# Name -> the distribution of this repository that provides it, for "pip install" hints.
STANDARD_PLUGINS: dict[str, str] = {
    "greedy": "decodekit-greedy",
    "temperature": "decodekit-temperature",
    "top_k": "decodekit-top-k",
    "top_p": "decodekit-top-p",
    "repetition_penalty": "decodekit-repetition-penalty",
    "dense": "decodekit-cache-dense",
    "gqa": "decodekit-cache-gqa",
    "tiny-shakespeare": "decodekit-shakespeare",
    "hf": "decodekit-hf",
}


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _resolve(obj: object, what: str, distribution: str) -> Any:
    """Import "module:attr" lazily; anything else is returned as is."""
    if not isinstance(obj, str):
        return obj
    module_name, _, attr = obj.partition(":")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split(".") if attr else ():
            value = getattr(value, part)
    except Exception as exc:
        raise PluginError(f"{what} from distribution {distribution}: cannot import {obj!r}: {exc}") from exc
    return value


@dataclass
class SamplerEntry:
    name: str
    impl: object  # class, factory `(params) -> stage`, or "module:attr"
    params_model: type[Params]
    description: str
    distribution: str
    version: str
    declared_kind: str | None = None

    def factory(self) -> Callable[[Params], Any]:
        resolved: Callable[[Params], Any] = _resolve(self.impl, f"sampler {self.name!r}", self.distribution)
        return resolved

    @property
    def kind(self) -> str:
        if self.declared_kind is not None:
            return self.declared_kind
        return str(getattr(self.factory(), "kind", "processor"))


@dataclass
class CacheEntry:
    name: str
    impl: object  # `(spec) -> KVCache` or "module:attr"
    description: str
    distribution: str
    version: str

    def factory(self) -> Callable[[CacheSpec], KVCache]:
        resolved: Callable[[CacheSpec], KVCache] = _resolve(self.impl, f"cache {self.name!r}", self.distribution)
        return resolved


@dataclass
class ModelEntry:
    name: str
    loader: object  # `(argument: str | None) -> model` or "module:attr"
    description: str
    distribution: str
    version: str

    def factory(self) -> Callable[[str | None], Any]:
        resolved: Callable[[str | None], Any] = _resolve(self.loader, f"model {self.name!r}", self.distribution)
        return resolved


@dataclass
class StrategyEntry:
    name: str
    impl: object  # `(model, prompts, **options) -> Generation` or "module:attr"
    description: str
    distribution: str
    version: str

    def factory(self) -> Callable[..., Generation]:
        resolved: Callable[..., Generation] = _resolve(self.impl, f"strategy {self.name!r}", self.distribution)
        return resolved


@dataclass
class PluginInfo:
    """One loaded plugin distribution and what it registered."""

    distribution: str
    version: str
    entry_points: list[str] = field(default_factory=list)
    samplers: list[str] = field(default_factory=list)
    cache_backends: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)


@dataclass
class PluginFailure:
    """An entry point that failed to load or to register."""

    distribution: str
    version: str
    entry_point: str
    error: str


@dataclass
class Registry:
    samplers: dict[str, SamplerEntry] = field(default_factory=dict)
    caches: dict[str, CacheEntry] = field(default_factory=dict)
    models: dict[str, ModelEntry] = field(default_factory=dict)
    strategies: dict[str, StrategyEntry] = field(default_factory=dict)
    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)


# Plugins registered in code with register_plugin(): (object, label).
_code_plugins: list[tuple[object, str]] = []
_registry: Registry | None = None


def _strict() -> bool:
    return os.environ.get("DECODEKIT_STRICT_PLUGINS", "").strip().lower() not in ("", "0", "false", "no")


def _allowlist() -> set[str] | None:
    raw = os.environ.get("DECODEKIT_LOAD_PLUGINS")
    if raw is None:
        return None
    return {canonical_name(n) for n in raw.split(",") if n.strip()}


def _entry_points() -> list[metadata.EntryPoint]:
    seen: set[tuple[str, str]] = set()
    eps = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = canonical_name(ep.dist.name) if ep.dist is not None else "?"
        if (dist, ep.name) in seen:  # the same distribution found twice on sys.path
            continue
        seen.add((dist, ep.name))
        eps.append(ep)
    return sorted(eps, key=lambda e: (canonical_name(e.dist.name) if e.dist else "", e.name))


def _core_version() -> str:
    try:
        return metadata.version(CORE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _Loader:
    """Builds a Registry: loads plugin objects, then calls each one's hooks with a bound `register`."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.strict = _strict()

    def fail(self, distribution: str, version: str, entry_point: str, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        if self.strict:
            raise PluginError(
                f"plugin {distribution} {version} (entry point {entry_point!r}) failed: {error} "
                "(DECODEKIT_STRICT_PLUGINS is set)"
            ) from exc
        self.registry.failures.append(PluginFailure(distribution, version, entry_point, error))
        warnings.warn(
            f"decodekit: plugin {distribution} {version} (entry point {entry_point!r}) failed to load: {error}",
            RuntimeWarning,
            stacklevel=2,
        )

    def add(self, plugin: object, distribution: str, version: str, entry_point: str) -> None:
        info = self.registry.plugins.setdefault(distribution, PluginInfo(distribution, version))
        info.entry_points.append(entry_point)
        pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        pm.add_hookspecs(hookspecs)
        try:
            pm.register(plugin, name=f"{distribution}:{entry_point}")
            for hook_name, add in (
                ("register_samplers", self._sampler_registrar(info)),
                ("register_cache_backends", self._cache_registrar(info)),
                ("register_models", self._model_registrar(info)),
                ("register_strategies", self._strategy_registrar(info)),
            ):
                for impl in getattr(pm.hook, hook_name).get_hookimpls():
                    impl.function(add)
        except PluginError:
            raise
        except Exception as exc:
            self.fail(distribution, version, entry_point, exc)

    def _conflict(self, what: str, name: str, first: str, second: str) -> PluginError:
        return PluginError(
            f"{what} name {name!r} is registered by two distributions: {first} and {second}; "
            "uninstall one, or restrict loading with DECODEKIT_LOAD_PLUGINS"
        )

    def _sampler_registrar(self, info: PluginInfo) -> hookspecs.SamplerRegistrar:
        def register(
            name: str, impl: object, params: object = None, description: str = "", *, kind: str | None = None
        ) -> None:
            if name in self.registry.samplers:
                raise self._conflict("sampler", name, self.registry.samplers[name].distribution, info.distribution)
            if kind is not None and kind not in ("processor", "selector"):
                raise PluginError(f"{info.distribution}: sampler {name!r}: kind={kind!r}; allowed: processor, selector")
            model = params if params is not None else getattr(impl, "params_model", NoParams)
            if not (isinstance(model, type) and issubclass(model, Params)):
                raise PluginError(f"{info.distribution}: sampler {name!r}: params must be a decodekit.Params subclass")
            impl_name = getattr(impl, "name", name)
            if impl_name != name:
                raise PluginError(f"{info.distribution}: sampler {name!r} registers a class named {impl_name!r}")
            self.registry.samplers[name] = SamplerEntry(
                name, impl, model, description, info.distribution, info.version, kind
            )
            info.samplers.append(name)

        return register

    def _cache_registrar(self, info: PluginInfo) -> hookspecs.CacheRegistrar:
        def register(name: str, impl: object, description: str = "") -> None:
            if name in self.registry.caches:
                raise self._conflict("cache backend", name, self.registry.caches[name].distribution, info.distribution)
            self.registry.caches[name] = CacheEntry(name, impl, description, info.distribution, info.version)
            info.cache_backends.append(name)

        return register

    def _model_registrar(self, info: PluginInfo) -> hookspecs.ModelRegistrar:
        def register(name: str, loader: object, description: str = "") -> None:
            if name in self.registry.models:
                raise self._conflict("model", name, self.registry.models[name].distribution, info.distribution)
            self.registry.models[name] = ModelEntry(name, loader, description, info.distribution, info.version)
            info.models.append(name)

        return register

    def _strategy_registrar(self, info: PluginInfo) -> hookspecs.StrategyRegistrar:
        def register(name: str, impl: object, description: str = "") -> None:
            if name in self.registry.strategies:
                raise self._conflict("strategy", name, self.registry.strategies[name].distribution, info.distribution)
            self.registry.strategies[name] = StrategyEntry(name, impl, description, info.distribution, info.version)
            info.strategies.append(name)

        return register


def _build() -> Registry:
    from decodekit import builtin_plugin

    loader = _Loader()
    loader.add(builtin_plugin, CORE_DISTRIBUTION, _core_version(), "builtin")
    allowed = _allowlist()
    for ep in _entry_points():
        dist = canonical_name(ep.dist.name) if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else "?"
        if allowed is not None and dist not in allowed:
            continue  # decided from metadata: the module is never imported
        try:
            plugin = ep.load()
        except Exception as exc:
            loader.fail(dist, version, ep.name, exc)
            continue
        loader.add(plugin, dist, version, ep.name)
    for plugin, label in _code_plugins:
        loader.add(plugin, label, "(in code)", "register_plugin")
    return loader.registry


def get_registry() -> Registry:
    """The registry, built from the installed plugins on first use."""
    global _registry
    if _registry is None:
        _registry = _build()
    return _registry


def reload_plugins() -> Registry:
    """Forget the registry and rebuild it (after installing plugins or changing the environment)."""
    global _registry
    _registry = None
    return get_registry()


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin object (a module or an object with `@hookimpl` methods) from code."""
    label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    _code_plugins.append((plugin, label))
    reload_plugins()


def unregister_plugin(plugin: object) -> None:
    """Undo `register_plugin`."""
    _code_plugins[:] = [(p, n) for p, n in _code_plugins if p is not plugin]
    reload_plugins()


def _unknown(what: str, name: str, installed: Iterable[str]) -> UnknownNameError:
    names = sorted(installed)
    msg = f"unknown {what} {name!r}; installed: {', '.join(names) or 'none'}"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    if name in STANDARD_PLUGINS:
        dist = STANDARD_PLUGINS[name]
        msg += f". {name!r} is provided by {dist}: pip install {dist} (from a checkout: pip install plugins/{dist})"
    return UnknownNameError(msg)


def sampler_entry(name: str) -> SamplerEntry:
    registry = get_registry()
    try:
        return registry.samplers[name]
    except KeyError:
        raise _unknown("sampler", name, registry.samplers) from None


def create(name: str, /, *args: Any, **params: Any) -> Any:
    """Build the registered sampler `name`; positional values fill parameters in declared order."""
    entry = sampler_entry(name)
    if args:
        fields = list(entry.params_model.model_fields)
        if len(args) > len(fields):
            raise ParameterError(
                f"{name}: {len(args)} positional values {args!r}; "
                f"allowed: at most {len(fields)} ({', '.join(fields) or 'none'})"
            )
        for key, value in zip(fields, args):
            if key in params:
                raise ParameterError(f"{name}: parameter {key} given both by position and by name")
            params[key] = value
    return entry.factory()(validate_params(name, entry.params_model, params))


def create_cache(name: str, spec: CacheSpec) -> KVCache:
    """Build the registered cache backend `name` for `spec`."""
    registry = get_registry()
    try:
        entry = registry.caches[name]
    except KeyError:
        raise _unknown("cache backend", name, registry.caches) from None
    return entry.factory()(spec)


def load_model(name: str) -> Any:
    """Load the registered model `name`, or `prefix:argument` (e.g. "hf:/path/to/checkpoint")."""
    registry = get_registry()
    prefix, sep, argument = name.partition(":")
    key = name if name in registry.models or not sep else prefix
    try:
        entry = registry.models[key]
    except KeyError:
        raise _unknown("model", key, registry.models) from None
    return entry.factory()(argument if key != name else None)


def decode(model: Any, prompts: Any, *, strategy: str = "sample", **options: Any) -> Generation:
    """Decode with the registered strategy `strategy` ("sample": `generate`, "beam": `beam_search`, ...)."""
    registry = get_registry()
    try:
        entry = registry.strategies[strategy]
    except KeyError:
        raise _unknown("strategy", strategy, registry.strategies) from None
    return entry.factory()(model, prompts, **options)

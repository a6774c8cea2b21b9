"""Plugin discovery, and building registered things by name: `create`, `create_cache`, `load_model`; how plugins
load, fail and are chosen (each entry point on its own, each hook all-or-nothing): docs/plugins.md, "Loading rules"."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from inspect import getattr_static
from typing import TYPE_CHECKING, Any, TypeGuard

import pluggy

from decodekit import hookspecs
from decodekit.chain_string import StageCall, parse_model, parse_stage
from decodekit.errors import PLUGIN_FAILURES, ParameterError, PluginError, UnknownNameError, did_you_mean
from decodekit.hookspecs import CORE_DISTRIBUTION, ENTRY_POINT_GROUP
from decodekit.params import Params, validate_params
from decodekit.registry import Category, Entry, PluginFailure, PluginInfo, Registry, make_entry
from decodekit.standard_plugins import canonical_name, env_names

if TYPE_CHECKING:
    from decodekit.cache import KVCache
    from decodekit.spec import CacheSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "CacheFactory",
    "Registry",
    "bind_arguments",
    "build_stage",
    "cache_factory",
    "create",
    "create_cache",
    "get_registry",
    "load_model",
    "register_plugin",
    "registered_name",
    "reload_plugins",
    "sampler_call",
    "sampler_entry",
    "unregister_plugin",
]

HOOKS: tuple[tuple[str, Category], ...] = (
    ("register_samplers", "sampler"),
    ("register_cache_backends", "cache backend"),
    ("register_models", "model"),
    ("register_strategies", "strategy"),
)
_HOOK_NAMES: tuple[str, ...] = tuple(name for name, _ in HOOKS)
_HOOKS_IN_WORDS = f"{', '.join(_HOOK_NAMES[:-1])} or {_HOOK_NAMES[-1]}"

CacheFactory = Callable[["CacheSpec"], "KVCache"]


def _entry_points() -> list[metadata.EntryPoint]:
    found: dict[tuple[str, str], metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):  # a distribution found twice on sys.path: the first
        found.setdefault((canonical_name(ep.dist.name) if ep.dist is not None else "", ep.name), ep)
    return [found[key] for key in sorted(found)]


class _Loader:
    """Builds a Registry: one pluggy `PluginManager`; each plugin's hooks are called through it on their
    own, with a `register` that stages, then commits. A plugin's import, registration and hooks run under
    `except PLUGIN_FAILURES`: what one plugin raises is its failure, no one else's."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.strict = os.environ.get("DECODEKIT_STRICT_PLUGINS", "").strip().lower() not in ("", "0", "false", "no")
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)

    def fail(self, failure: PluginFailure) -> None:
        if self.strict:
            raise PluginError(f"{failure.message()} (DECODEKIT_STRICT_PLUGINS is set)")
        self.registry.failures.append(failure)

    def add(self, plugin: object, distribution: str, version: str, entry_point: str) -> None:
        info = self.registry.plugins.setdefault(distribution, PluginInfo(distribution, version))
        info.entry_points.append(entry_point)
        if _is_plugin_class(plugin):  # pluggy would take its functions, then call each without an object
            made = f"a module-level plugin = {plugin.__name__}(), named 'module:plugin'"
            error = f"PluginError: {plugin.__name__} is a class, whose hooks need an object; allowed: {made}"
            self.fail(PluginFailure(distribution, version, entry_point, error))
            return
        try:
            self.pm.register(plugin, name=f"{distribution}:{entry_point}")
        except PLUGIN_FAILURES as exc:  # e.g. a hook implementation with the wrong arguments
            self.fail(PluginFailure(distribution, version, entry_point, _error(exc)))
            return
        hooks = [caller.name for caller in self.pm.get_hookcallers(plugin) or []]
        for problem, hook_name in _hook_problems(plugin, hooks):
            self.fail(PluginFailure(distribution, version, entry_point, f"PluginError: {problem}", hook_name))
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        for hook_name, category in HOOKS:
            hook = self.pm.subset_hook_caller(hook_name, remove_plugins=others)  # this plugin's alone
            for conflict in self.registry.add(self._call_hook(hook, hook_name, category, info, entry_point), info):
                if self.strict:
                    raise PluginError(f"{conflict.message()} (DECODEKIT_STRICT_PLUGINS is set)")

    def _call_hook(
        self, hook: Any, hook_name: str, category: Category, info: PluginInfo, entry_point: str
    ) -> list[Entry]:
        """The entries one hook registers, or none (and a failure) if any registration is bad."""
        staged: dict[str, Entry] = {}

        def register(
            name: object, impl: object, params: object = None, description: object = "", **kind_specific: object
        ) -> None:
            entry = make_entry(
                category, info.distribution, info.version, name, impl, params, description, kind_specific
            )
            if entry.name in staged:
                raise PluginError(f"{category} {entry.name!r}: registered twice by the same hook")
            staged[entry.name] = entry

        try:
            hook(register=register)
        except PLUGIN_FAILURES as exc:
            self.fail(PluginFailure(info.distribution, info.version, entry_point, _error(exc), hook_name))
            return []
        return list(staged.values())


def _hook_problems(plugin: object, hooks: list[str]) -> Iterator[tuple[str, str | None]]:
    """What would make a plugin register nothing without a word: a hook name misspelt, a hook not marked, or an entry
    point naming a package without hooks (its `plugin` module has them), with the hook to blame (None: the plugin)."""
    if not hooks and isinstance(plugin, types.ModuleType) and hasattr(plugin, "__path__"):
        modules = ", ".join(f"{plugin.__name__}.{m.name}" for m in pkgutil.iter_modules(plugin.__path__))
        yield (
            f"{plugin.__name__} is a package without a register_* hook, so it registers nothing; allowed: the module "
            f"with the @decodekit.hookimpl functions (its modules: {modules or 'none'})",
            None,
        )
    for h in hooks:
        if h not in _HOOK_NAMES:
            yield f"unknown hook {h!r}; allowed: {', '.join(_HOOK_NAMES)}{did_you_mean(h, _HOOK_NAMES)}", h
    for name in _HOOK_NAMES:  # a plugin may implement no hook (decodekit-cli is listed, registers nothing)
        if name not in hooks and callable(getattr(plugin, name, None)):
            yield f"{name} is not marked @decodekit.hookimpl, so it is never called", name


def _error(exc: BaseException) -> str:
    """How a plugin's exception is reported: its type and message (SystemExit shows its code)."""
    return f"{type(exc).__name__}: {exc}"


EXTRA = "DECODEKIT_EXTRA_PLUGINS"


def _import_extra(spec: str) -> object:
    """The plugin object `spec` in DECODEKIT_EXTRA_PLUGINS names; else a PluginError naming the variable and `spec`:
    one part empty, the module not importing (with its own error), or an attribute it lacks (with what it has)."""
    module_name, colon, attr = spec.partition(":")
    parts = attr.split(".") if colon else []
    if not module_name or not all(parts):
        empty = "attribute" if module_name else "module"
        raise PluginError(
            f"{EXTRA}={spec} is invalid: an empty {empty}; allowed: 'pkg.module' or 'pkg.module:attr', comma-separated"
        )
    try:
        value: object = importlib.import_module(module_name)
    except PLUGIN_FAILURES as exc:
        raise PluginError(_import_failure(spec, module_name, exc)) from exc
    path = module_name  # the spec of `value`
    for part in parts:
        if not hasattr(value, part):
            where = path if ":" in path else f"module {path!r}"
            raise PluginError(f"{EXTRA}={spec}: {where} has no attribute {part!r}; {_plugins_in(value, path, part)}")
        value, path = getattr(value, part), _attribute_spec(path, part)
    return value


def _attribute_spec(path: str, name: str) -> str:
    """The spec of attribute `name` of the object at spec `path`: 'pkg.module:name', then 'pkg.module:attr.name'."""
    return f"{path}{'.' if ':' in path else ':'}{name}"


def _import_failure(spec: str, module: str, exc: BaseException) -> str:
    """Why the module did not import; where it is not found itself (not a module it imports), that it must be on
    sys.path, which a console script's current folder is not."""
    name = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not name or not (module == name or module.startswith(f"{name}.")):
        return f"{EXTRA}={spec}: module {module!r} failed to import: {_error(exc)}"
    return (
        f"{EXTRA}={spec}: module {module!r} is not importable from sys.path ({_error(exc)}); allowed: importable "
        f"modules, 'pkg.module' or 'pkg.module:attr' (a console script such as decodekit does not search the current "
        f"folder: for a {name}.py there, PYTHONPATH=. {EXTRA}={spec})"
    )


def _plugins_in(value: object, path: str, missing: str) -> str:
    """What `value` (at spec `path`) holds that looks like a plugin: an object, not a class, with a hook. Read
    statically: a module's lazy `__getattr__` (transformers') would import all it offers."""
    names = [n for n in dir(value) if not n.startswith("_") and _is_plugin(getattr_static(value, n, None))]
    found = [_attribute_spec(path, n) for n in names]
    if _is_plugin(value):  # a module with hooks of its own, say
        found.insert(0, f"{path} (itself)")
    if not found:
        return f"allowed: an object with a {_HOOKS_IN_WORDS} hook, and {path} has none"
    return f"allowed: its plugin objects (with a register_* hook) {', '.join(found)}{did_you_mean(missing, names)}"


def _is_plugin(obj: object) -> bool:
    return not isinstance(obj, type) and any(callable(getattr(obj, hook, None)) for hook in _HOOK_NAMES)


class _Builtin:
    """The core's own registrations, made through the same hooks as any plugin."""

    @hookspecs.hookimpl
    def register_samplers(self, register: hookspecs.SamplerRegistrar) -> None:
        register(
            "sample",
            "decodekit.sample:Sample",
            description="Draw a token from softmax(logits) with the row's own generator",
            kind="selector",
        )

    @hookspecs.hookimpl
    def register_strategies(self, register: hookspecs.StrategyRegistrar) -> None:
        register(
            "sample",
            "decodekit.loop:sample_policy",
            description="One token per step from the chain's selector (dk.generate)",
        )


# Plugins registered in code with register_plugin(): (object, label).
_code_plugins: list[tuple[object, str]] = []
_registry: Registry | None = None
# A service's first requests come together: one thread builds the registry, the others wait for it (reentrant: a
# plugin's import may ask for it).
_building = threading.RLock()


def _build() -> Registry:
    from decodekit import __version__

    loader = _Loader()
    loader.add(_Builtin(), CORE_DISTRIBUTION, __version__, "builtin")
    allowed, denied = env_names("DECODEKIT_LOAD_PLUGINS"), env_names("DECODEKIT_DISABLE_PLUGINS") or set()
    entry_points = _entry_points()
    for variable, names in (("DECODEKIT_LOAD_PLUGINS", allowed), ("DECODEKIT_DISABLE_PLUGINS", denied)):
        _check_installed(variable, names or set(), entry_points)
    for ep in entry_points:  # one by one: `pm.load_setuptools_entrypoints` stops at the first failure
        dist, version = (canonical_name(ep.dist.name), ep.dist.version) if ep.dist is not None else ("?", "?")
        if (allowed is not None and dist not in allowed) or dist in denied:
            loader.registry.disabled.setdefault(dist, version)
            continue  # decided from metadata: the module is never imported
        try:
            plugin = ep.load()
        except PLUGIN_FAILURES as exc:
            loader.fail(PluginFailure(dist, version, ep.name, _error(exc)))
            continue
        loader.add(plugin, dist, version, ep.name)
    for spec in (s.strip() for s in os.environ.get(EXTRA, "").split(",")):
        if spec and canonical_name(spec) not in denied:
            try:
                extra = _import_extra(spec)
            except PLUGIN_FAILURES as exc:
                loader.fail(PluginFailure(spec, "(extra)", EXTRA, _error(exc)))
                continue
            loader.add(extra, spec, "(extra)", EXTRA)
    for plugin, label in _code_plugins:
        if canonical_name(label) not in denied:
            loader.add(plugin, label, "(in code)", "register_plugin")
    return loader.registry


def _check_installed(variable: str, named: set[str], entry_points: list[metadata.EntryPoint]) -> None:
    """Every name in DECODEKIT_LOAD_PLUGINS or DECODEKIT_DISABLE_PLUGINS is an installed distribution (or an
    extra or in-code plugin's name): a typo would load, or disable, nothing, silently."""
    installed = {CORE_DISTRIBUTION} | {canonical_name(ep.dist.name) for ep in entry_points if ep.dist is not None}
    extras = (env_names(EXTRA) or set()) | {canonical_name(label) for _, label in _code_plugins}
    unknown = sorted(named - installed - extras)  # extras always load, or are disabled by their name
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        raise UnknownNameError(
            f"{variable} names {names}, which {'is' if len(unknown) == 1 else 'are'} no installed plugin "
            f"distribution{'' if len(unknown) == 1 else 's'}; allowed: a comma-separated list of "
            f"{', '.join(sorted(installed))} (empty: none)"
        )


def _install(registry: Registry) -> Registry:
    """Make `registry` the current one, warning once about each failure and conflict in it."""
    global _registry
    _registry = registry
    for problem in [*(f.message() for f in registry.failures), *(c.message() for c in registry.conflicts)]:
        warnings.warn(f"decodekit: {problem}", RuntimeWarning, stacklevel=3)
    return registry


def get_registry() -> Registry:
    """The registry, built from the installed plugins on first use (once, whatever the threads asking)."""
    if _registry is not None:
        return _registry
    with _building:
        return _registry if _registry is not None else _install(_build())


def reload_plugins() -> Registry:
    """Forget the registry and rebuild it (after installing plugins or changing the environment)."""
    return _install(_build())


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin object (a module or an object with `@hookimpl` methods) from code, as `name` (what errors
    and `unregister_plugin` call it; default: its `__name__`, else its class's); the same object again is a no-op.
    One that fails, or takes a name already registered, raises `PluginError` and is not kept (docs/plugins.md,
    "Loading rules")."""
    label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    if any(p is plugin for p, _ in _code_plugins):
        return
    if (problem := _unregistrable(plugin, label)) is not None:
        raise PluginError(problem)
    _code_plugins.append((plugin, label))
    try:
        registry = _build()
        problems = [f.message() for f in registry.failures if f.distribution == label]
        in_code = [n for _, n in _code_plugins]
        problems += [c.message(label, in_code) for c in registry.conflicts if label in c.distributions]
        if problems:
            raise PluginError("; ".join(problems))
    except PluginError:
        _code_plugins.pop()
        raise
    _install(registry)


def _is_plugin_class(plugin: object) -> TypeGuard[type]:
    """A class with hook functions, given in place of an object of it."""
    return isinstance(plugin, type) and any(inspect.isfunction(getattr_static(plugin, n, None)) for n in _HOOK_NAMES)


def _unregistrable(plugin: object, label: str) -> str | None:
    """Why `plugin` cannot be registered from code: it has no hook (a processor function passed as the plugin; an
    entry point may have none), a class whose hooks need an object, or its name is taken (pluggy's error would list
    every plugin loaded)."""
    if _is_plugin_class(plugin):
        made = f"dk.register_plugin({plugin.__name__}())"
        return f"plugin {label!r} is a class, whose hooks need an object; allowed: {made}"
    if not any(n in _HOOK_NAMES or hasattr(getattr(plugin, n, None), f"{ENTRY_POINT_GROUP}_impl") for n in dir(plugin)):
        return (
            f"plugin {label!r} has no hook, so it registers nothing; allowed: a module or object with "
            f"@decodekit.hookimpl functions named {_HOOKS_IN_WORDS} (a processor function goes in "
            "a dk.Chain as it is, unregistered)"
        )
    if any(n == label for _, n in _code_plugins):
        return (
            f"plugin {label!r} is already registered from code, by another object; allowed: a name of its own, "
            f"dk.register_plugin(plugin, name=...), or dk.unregister_plugin({label!r}) first"
        )
    return None


def unregister_plugin(plugin: object) -> None:
    """Undo `register_plugin`, given the object or the name it was registered under (a notebook cell run again no
    longer holds the first object)."""
    if isinstance(plugin, str):
        names = [n for _, n in _code_plugins]
        if plugin not in names:
            raise PluginError(
                f"dk.unregister_plugin: no plugin {plugin!r} registered from code; allowed: "
                f"{', '.join(map(repr, names)) or 'none registered'}"
            )
        _code_plugins[:] = [(p, n) for p, n in _code_plugins if n != plugin]
    else:
        _code_plugins[:] = [(p, n) for p, n in _code_plugins if p is not plugin]
    reload_plugins()


def registered_name(cls: type) -> str:
    """The sampler name `cls` is registered under; a class that no plugin registers is named after itself, in snake
    case (`MyShift` -> "my_shift"), a subclass of a registered one too: its spec must not rebuild its base."""
    registry = get_registry()
    return registry.built(("sampler name", cls), lambda: _sampler_name(registry, cls))  # a stage's name, often read


def _sampler_name(registry: Registry, cls: type) -> str:
    names = registry.sampler_names
    if (name := names.get(f"{cls.__module__}:{cls.__qualname__}") or names.get(cls)) is not None:
        return name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def sampler_entry(name: str) -> Entry:
    return get_registry().lookup("sampler", name)


def bind_arguments(owner: str, model: type[Params], args: tuple[Any, ...], params: dict[str, Any]) -> Params:
    """Validate `params`, positional values `args` filling the fields in declared order."""
    if args:
        fields = list(model.model_fields)
        if len(args) > len(fields):
            raise ParameterError(
                f"{owner}: {len(args)} positional values {args!r}; "
                f"allowed: at most {len(fields)} ({', '.join(fields) or 'none'})"
            )
        for key, value in zip(fields, args):
            if key in params:
                raise ParameterError(f"{owner}: parameter {key} given both by position and by name")
            params = {**params, key: value}
    return validate_params(owner, model, params)


def _given_once(
    what: str, text: str, call: StageCall, args: tuple[Any, ...], params: dict[str, Any]
) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """The name of `call` (parsed from `text`) and its values with the caller's `args` and `params` added;
    a value given in both is an error naming both."""
    owner = f"{what} {call.name}"
    if call.args and args:
        raise ParameterError(f"{owner}: positional values given both in {text!r} and as arguments")
    for key in params:
        if key in call.kwargs:
            raise ParameterError(f"{owner}: parameter {key} given both in {text!r} and by keyword")
    return call.name, (*call.args, *args), {**call.kwargs, **params}


def create(name: str, /, *args: Any, **params: Any) -> Any:
    """Build the registered sampler `name`, or one stage in its string form ("top_k(5)", as a cache's
    "window(size=128)"); positional values fill parameters in declared order."""
    if isinstance(name, str):  # a name that is not a string: the lookup says so
        name, args, params = _given_once("sampler", name, parse_stage(name, what="sampler"), args, params)
    return build_stage(*sampler_call(name, args, params))


def sampler_call(name: str, args: tuple[Any, ...] | list[Any], params: dict[str, Any]) -> tuple[Entry, Params]:
    """The registered sampler `name` and its parameters, checked: what `build_stage` builds a stage from."""
    entry = sampler_entry(name)
    return entry, bind_arguments(name, entry.params_model, tuple(args), params)


def build_stage(entry: Entry, params: Params) -> Any:
    """A new stage of the sampler `entry` with checked `params` (`sampler_call`)."""
    name = entry.name
    stage = entry.load()(params)
    if not hasattr(stage, "name"):  # a Stage's, which a chain reads: a bare function failed there, saying less
        got = f"the function {stage.__name__}" if inspect.isfunction(stage) else f"a {type(stage).__name__}"
        raise PluginError(
            f"sampler {name!r} from {entry.distribution}: impl(params) returned {got}, not a stage; allowed: a "
            "ProcessorBase or SelectorBase instance (a processor function goes in a dk.Chain as it is, unregistered)"
        )
    return stage


@dataclass(frozen=True)
class _BoundCache:
    """A cache backend with validated parameters: `(spec) -> KVCache`, named like its string form."""

    entry: Entry
    impl: Callable[[CacheSpec, Params], KVCache]
    params: Params

    def __call__(self, spec: CacheSpec) -> KVCache:
        from decodekit.spec import CacheSpec  # torch: imported when a cache is built, never for a listing

        if not isinstance(spec, CacheSpec):
            raise ParameterError(
                f"cache {self.entry.name}: spec={spec!r} is invalid; allowed: a decodekit.CacheSpec "
                "(CacheSpec.for_model(model.spec, batch_size=..., capacity=...))"
            )
        return self.impl(spec, self.params)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{self.entry.name}({args})" if args else self.entry.name


def cache_factory(cache: str, /, **params: Any) -> _BoundCache:
    """The backend named by `cache` ("gqa", or the string form "window(size=128, sinks=4)")
    with its parameters validated once: a `(spec) -> KVCache` factory, made once per text and registry."""
    if not isinstance(cache, str):
        raise ParameterError(f"cache={cache!r} is invalid; allowed: a cache backend name or 'name(args)'")
    registry = get_registry()
    if params:
        return _bound_cache(registry, cache, params)
    return registry.built(("cache", cache), lambda: _bound_cache(registry, cache, {}))


def _bound_cache(registry: Registry, cache: str, params: dict[str, Any]) -> _BoundCache:
    name, args, kwargs = _given_once("cache", cache, parse_stage(cache, what="cache"), (), params)
    entry = registry.lookup("cache backend", name)
    validated = bind_arguments(f"cache {name}", entry.params_model, args, kwargs)
    return _BoundCache(entry, entry.load(), validated)


def create_cache(cache: str, spec: CacheSpec, /, **params: Any) -> KVCache:
    """A cache for `spec`: `create_cache("window(size=128)", spec)` or `create_cache("window", spec, size=128)`."""
    return cache_factory(cache, **params)(spec)


def load_model(name: str, /, **params: Any) -> Any:
    """Load the registered model `name`, its parameters by keyword or in its string form (as a cache's
    "window(size=128)"), and with an argument for its loader after a colon: "hf(dtype='bfloat16'):/path/to/checkpoint"
    is `load_model("hf:/path/to/checkpoint", dtype="bfloat16")`."""
    if not isinstance(name, str):
        raise ParameterError(f"model name {name!r} is invalid; allowed: a registered model name")
    prefix, sep, argument = name.partition(":")
    # A model name holds no "(" or ":", so only a call form needs the parser (it finds where the call ends).
    call, loader_arg = parse_model(name) if "(" in prefix else (StageCall(prefix, [], {}), argument if sep else None)
    key, args, kwargs = _given_once("model", name, call, (), params)
    if key not in get_registry().section("model") and os.path.isdir(name):  # as from_pretrained takes a checkpoint
        raise UnknownNameError(
            f"model {name!r} is a directory, not a model name; allowed: the name of the model that loads it before "
            f"it, as 'hf:{name}' for a Hugging Face checkpoint"
        )
    entry = get_registry().lookup("model", key)
    validated = bind_arguments(f"model {key}", entry.params_model, args, kwargs)
    return _checked_model(entry.load()(loader_arg, validated), entry)


def _checked_model(model: Any, entry: Entry) -> Any:
    """What a loader returned, if it has what every decode reads first; else the plugin's error (a loader returning
    None was "the model has no tokenizer" on the command line, a tokenizer without decode an AttributeError)."""
    where = f"model {entry.name!r} from {entry.distribution}: its loader returned"
    if getattr(model, "spec", None) is None:
        returned = "None" if model is None else f"a {type(model).__name__} without a spec"
        raise PluginError(
            f"{where} {returned}; allowed: a model, with a decodekit.ModelSpec `spec` (docs/concepts.md, Models)"
        )
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and not all(callable(getattr(tokenizer, m, None)) for m in ("encode", "decode")):
        raise PluginError(
            f"{where} a model whose tokenizer {type(tokenizer).__name__} lacks encode or decode; allowed: a tokenizer "
            "with encode(text) -> list[int] and decode(ids) -> str, or tokenizer None (token-id prompts)"
        )
    return model

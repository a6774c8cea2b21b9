"""The registry: one entry type, one registration check, one lookup for every kind of plugin thing; each hook's
`register(...)` call becomes an `Entry`, and `decodekit.plugins` builds the registry from the installed plugins."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from typing import Any, Literal, TypeVar, cast

from decodekit.chain_string import MODEL_NAME
from decodekit.errors import PLUGIN_FAILURES, PluginError, UnknownNameError, did_you_mean
from decodekit.hookspecs import CORE_DISTRIBUTION, ENTRY_POINT_GROUP
from decodekit.params import NoParams, Params
from decodekit.signatures import binds
from decodekit.standard_plugins import STANDARD_PLUGINS, checkout, install_hint, installed_but

__all__ = [
    "CATEGORIES",
    "Category",
    "Conflict",
    "Entry",
    "PluginFailure",
    "PluginInfo",
    "Registry",
    "import_object",
    "make_entry",
    "without_entry_point",
]

T = TypeVar("T")

BUILT_KEPT = 256
"""The most things a registry keeps built from its entries (`Registry.built`)."""

Category = Literal["sampler", "cache backend", "model", "strategy"]
CATEGORIES: tuple[Category, ...] = ("sampler", "cache backend", "model", "strategy")

# Samplers, caches and strategies are named in chain strings, so their names are identifiers; models: MODEL_NAME.
_IDENTIFIER = (re.compile(r"[A-Za-z_]\w*", re.ASCII), "a Python identifier (letters, digits, '_')")
_MODEL_NAME = (MODEL_NAME, "letters, digits, '_', '-', '.'")
_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
NO_ENTRY_POINT = (  # what is wrong with a distribution `without_entry_point` lists, and what to do
    f"requires decodekit and declares no entry point: a plugin's pyproject.toml needs "
    f"[project.entry-points.{ENTRY_POINT_GROUP}], then pip install it again"
)
_CALLED_AS = {  # how an impl of each category is called, and what takes that call (a sampler's: `Entry.load`)
    "cache backend": "impl(spec, params) and returns the cache; allowed: a class or function taking "
    "(spec, params=None)",
    "model": "impl(argument, params) and returns the model; allowed: a function taking (argument, params)",
    "strategy": "policy(decoding, params); allowed: a function taking (decoding, params)",
}
_SECTIONS = {"sampler": "samplers", "cache backend": "caches", "model": "models", "strategy": "strategies"}
_INFO_LISTS = {**_SECTIONS, "cache backend": "cache_backends"}  # PluginInfo's list of each category


def import_object(path: str) -> Any:
    """The object at `package.module` or `package.module:attr.attr`."""
    module_name, _, attr = path.partition(":")
    value: Any = importlib.import_module(module_name)
    for part in attr.split(".") if attr else ():
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Entry:
    """One registered thing: its name, implementation, parameter model and where it came from."""

    category: Category
    name: str
    impl: object  # the implementation, or its import path "module:attr" (resolved by `load`)
    params_model: type[Params]
    description: str
    distribution: str
    version: str
    kind: str | None = None  # samplers: "processor" unless registered as a "selector" (`load` checks the class agrees)

    def load(self) -> Any:
        """The implementation, imported on first use when it was registered by path; a stage class's
        parameter model and kind must be the registration's (they cannot drift apart)."""
        where = f"{self.category} {self.name!r} from {self.distribution}"
        impl = self.impl
        if isinstance(impl, str):
            try:
                impl = import_object(impl)
            except PLUGIN_FAILURES as exc:  # the plugin fails, not the caller
                raise PluginError(self._not_imported(exc)) from exc
            if not callable(impl):
                raise PluginError(f"{where}: {self.impl!r} is not callable")
        model = getattr(impl, "params_model", None)
        if isinstance(impl, type) and model is not None and model is not self.params_model:
            raise PluginError(
                f"{where}: its class takes {getattr(model, '__name__', model)}, its registration "
                f"{self.params_model.__name__}; allowed: the same parameter model"
            )
        if self.category == "sampler" and not isinstance(impl, type) and not binds(impl, None):
            raise PluginError(  # a processor function registered as itself: its TypeError said nothing of why
                f"{where}: {_with_signature(impl)} is called as "
                "impl(params) and returns the stage; allowed: a ProcessorBase or SelectorBase subclass, or a function "
                "returning one (a processor function (logits, ctx) goes in a dk.Chain as it is, unregistered)"
            )
        if (call := _CALLED_AS.get(self.category)) is not None and not binds(impl, None, None):
            raise PluginError(  # else a TypeError at every use, a traceback on the command line
                f"{where}: {_with_signature(impl)} is called as {call}"
            )
        kind = getattr(impl, "kind", None)
        if self.category == "sampler" and isinstance(impl, type) and kind is not None and kind != self.kind:
            raise PluginError(
                f"{where}: its class is a {kind}, its registration a {self.kind}; allowed: the same kind: register it "
                f"with kind={kind!r} or subclass {str(self.kind).capitalize()}Base"
            )
        return impl

    def _not_imported(self, exc: BaseException) -> str:
        """Why `impl` did not import: to a standard plugin's user, what to reinstall; to a plugin's author, what the
        register call must name."""
        failed = f"{self.impl!r}: {type(exc).__name__}: {exc}"
        if STANDARD_PLUGINS.get(self.name) == self.distribution:
            return (
                f"{self.category} {self.name!r} is installed, but {self.distribution} {self.version} failed to import "
                f"it ({failed}): a broken install or a missing dependency; reinstall it: "
                f"{install_hint([self.distribution], checkout(), pip='pip install --force-reinstall')}"
            )
        return (
            f"{self.category} {self.name!r} from {self.distribution}: cannot import {failed}; allowed: an import path "
            f"'package.module:attr' that imports in this environment ({self.distribution}'s register call names it)"
        )


def _with_signature(impl: object) -> str:
    """`impl` by its name and signature, `f(a, b)`, for a refusal of how it is called."""
    return f"{getattr(impl, '__name__', impl)}{inspect.signature(cast(Any, impl))}"


def without_entry_point() -> list[str]:
    """Plugins found by nothing: decodekit-* distributions requiring decodekit, with no entry point in its group."""
    found = []
    for dist in metadata.distributions():
        needs = {re.split(r"[^\w.-]", r, maxsplit=1)[0].lower() for r in dist.requires or () if "extra" not in r}
        # A broken METADATA may lack a Name: `dist.name` warns there from Python 3.12 (a KeyError to come). Every
        # Python's metadata has .get (an email Message); typeshed's PackageMetadata does not say so.
        name = dist.metadata.get("Name") or ""  # type: ignore[attr-defined]
        plugin_named = re.match(rf"{CORE_DISTRIBUTION}[-_.]", name, re.IGNORECASE)  # not an application
        if CORE_DISTRIBUTION in needs and plugin_named and not dist.entry_points.select(group=ENTRY_POINT_GROUP):
            found.append(name)
    return sorted(set(found))


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

    def names(self, category: Category) -> list[str]:
        return cast("list[str]", getattr(self, _INFO_LISTS[category]))


@dataclass
class PluginFailure:
    """An entry point that failed to load, or one of its hooks that failed (its registrations dropped)."""

    distribution: str
    version: str
    entry_point: str
    error: str
    hook: str | None = None  # None: the entry point itself failed to import

    def message(self) -> str:
        where = f"entry point {self.entry_point!r}" + (f", hook {self.hook}" if self.hook else "")
        what = "failed to load" if self.hook is None else "failed (its registrations were dropped)"
        return f"plugin {self.distribution} {self.version} ({where}) {what}: {self.error}"


@dataclass
class Conflict:
    """A name registered by more than one distribution: unusable until all but one are disabled."""

    category: Category
    name: str
    distributions: list[str]

    def message(self, refused: str | None = None, in_code: Iterable[str] = ()) -> str:
        """Why the name is unusable; or, `refused` naming an in-code plugin, why that plugin is not kept (taking the
        name from others registered from code, `in_code`, is unregistering them: a notebook's way)."""
        dists = self.distributions
        said = f"{self.category} name {self.name!r} is registered by {len(dists)} distributions: {' and '.join(dists)}"
        if refused is not None:  # the registry stays as it was, so the name stays the others'
            others = [d for d in dists if d != refused]
            if set(others) <= set(in_code):
                take = " and ".join(f"dk.unregister_plugin({d!r})" for d in others)
            else:
                take = f"DECODEKIT_DISABLE_PLUGINS={','.join(others)}"
            kept = f"{refused} is not kept, so the name stays {','.join(others)}'s"
            return f"{said}; {kept} (use another name, or {take} to take it)"
        return (
            f"{said}; it is unusable until one is chosen: DECODEKIT_DISABLE_PLUGINS={','.join(dists[1:])} "
            f"keeps {dists[0]}'s (or uninstall all but one)"
        )


@dataclass(eq=False)  # one registry is one set of plugins: compared and hashed by identity, so caches can key on it
class Registry:
    """Everything the installed plugins registered, by category; plus their failures and name conflicts."""

    samplers: dict[str, Entry] = field(default_factory=dict)
    caches: dict[str, Entry] = field(default_factory=dict)
    models: dict[str, Entry] = field(default_factory=dict)
    strategies: dict[str, Entry] = field(default_factory=dict)
    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    failures: list[PluginFailure] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    disabled: dict[str, str] = field(default_factory=dict)  # distribution: version, not loaded as the variables say

    @cached_property
    def sampler_names(self) -> dict[object, str]:
        """Each registered sampler's name, by its implementation (the object, or its import path)."""
        return {entry.impl: name for name, entry in reversed(self.samplers.items())}

    def built(self, key: tuple[str, Hashable], build: Callable[[], T]) -> T:
        """`build()`, kept under `key` (what, its text or class) while this registry lives: what a request builds
        from its entries by name (a chain string's stages, a cache backend's factory) is built once, not on every
        request. A registered or unregistered plugin makes a new registry, so nothing built from another set of
        plugins is reused. Errors are not kept (raised anew each time); at most `BUILT_KEPT` things are."""
        if (known := self._built.get(key)) is not None:
            return cast(T, known)
        value = build()
        if len(self._built) >= BUILT_KEPT:  # a service making every request's chain text anew: start over
            self._built.clear()
        self._built[key] = value
        return value

    @cached_property
    def _built(self) -> dict[tuple[str, Hashable], object]:
        return {}

    def section(self, category: Category) -> dict[str, Entry]:
        """The entries of one category, by name."""
        return cast("dict[str, Entry]", getattr(self, _SECTIONS[category]))

    def lookup(self, category: Category, name: str, also: tuple[str, ...] = ()) -> Entry:
        """The entry `name` of `category`; an unknown or conflicting name is an error saying what to do,
        listing and suggesting `also`: values the caller accepts that are not entries (cache="none")."""
        if not isinstance(name, str):
            raise UnknownNameError(f"{category} name {name!r} is a {type(name).__name__}; allowed: a string")
        if (entry := self.section(category).get(name)) is not None:
            return entry
        if (conflict := self._conflict(category, name)) is not None:
            raise PluginError(conflict.message())
        names = sorted(self.section(category))
        listed = f"installed: {', '.join(names) or 'none'}" + (f"; also accepted: {', '.join(also)}" if also else "")
        registered_as = next((c for c in CATEGORIES if name in self.section(c)), None)  # `beam` in a chain
        if (dist := STANDARD_PLUGINS.get(name)) is not None and registered_as is None:
            if why := installed_but(dist, self.failures):  # installed: a pip install would change nothing
                raise UnknownNameError(f"{category} {name!r} is {why}")
            raise UnknownNameError(  # a standard name: how to install it, not a close name
                f"{category} {name!r} is not installed; {listed}; {dist} registers it: "
                f"{install_hint([dist], checkout())}{self.unregistered}"
            )
        if registered_as is not None:
            raise UnknownNameError(
                f"unknown {category} {name!r}; {listed}; {name!r} is a {registered_as}, not a {category}"
            )
        raise UnknownNameError(
            f"unknown {category} {name!r}; {listed}{did_you_mean(name, [*names, *also])} (no installed plugin "
            f"distribution registers it{self.unregistered})"
        )

    def _conflict(self, category: Category, name: str) -> Conflict | None:
        """The conflict over `name` in `category`, where more than one distribution registered it."""
        return next((c for c in self.conflicts if (c.category, c.name) == (category, name)), None)

    @cached_property
    def unregistered(self) -> str:
        """Plugins whose names the registry lacks, as a clause (`; NAME failed to load: ...`; empty if none): those
        that failed to load, those without an entry point."""
        failed = ", ".join(dict.fromkeys(f.distribution for f in self.failures))
        said = f"; {failed} failed to load: `decodekit plugins` says why" if failed else ""
        return said + "".join(f"; {dist} {NO_ENTRY_POINT}" for dist in without_entry_point())

    def add(self, entries: Iterable[Entry], info: PluginInfo) -> list[Conflict]:
        """Add a hook's entries; a name another distribution holds becomes a conflict (returned)."""
        new: list[Conflict] = []
        for entry in entries:
            section = self.section(entry.category)
            conflict = self._conflict(entry.category, entry.name)
            if conflict is None and entry.name in section:  # the name's first holder becomes a conflict
                conflict = Conflict(entry.category, entry.name, [section.pop(entry.name).distribution])
                self.conflicts.append(conflict)
            if conflict is not None:
                conflict.distributions.append(entry.distribution)
                new.append(conflict)
            else:
                section[entry.name] = entry
            info.names(entry.category).append(entry.name)
        return new


def make_entry(
    category: Category,
    distribution: str,
    version: str,
    name: object,
    impl: object,
    params: object = None,
    description: object = "",
    kind_specific: Mapping[str, object] | None = None,
) -> Entry:
    """Check one `register(...)` call and build its entry; a bad argument is a `PluginError` naming it."""
    extra = dict(kind_specific or {})
    kind = extra.pop("kind", None) if category == "sampler" else None
    try:
        if not isinstance(name, str):
            raise PluginError(f"name {name!r} is a {type(name).__name__}; allowed: a string")
        pattern, allowed = _MODEL_NAME if category == "model" else _IDENTIFIER
        if not pattern.fullmatch(name):
            raise PluginError(f"name {name!r} is invalid; allowed: {allowed}")
        if isinstance(impl, str) and not _IMPORT_PATH.match(impl):
            raise PluginError(f"impl {impl!r} is invalid; allowed: a callable or an import path 'package.module:attr'")
        if not isinstance(impl, str) and not callable(impl):
            raise PluginError(
                f"impl {impl!r} ({type(impl).__name__}) is invalid; allowed: a callable or an import path 'module:attr'"
            )
        model = params if params is not None else getattr(impl, "params_model", NoParams)
        if not (isinstance(model, type) and issubclass(model, Params)):
            raise PluginError(f"params {model!r} is invalid; allowed: None or a decodekit.Params subclass")
        if not isinstance(description, str):
            raise PluginError(f"description {description!r} is a {type(description).__name__}; allowed: a string")
        if extra:
            allowed = "kind" if category == "sampler" else "none"
            raise PluginError(f"unknown keyword {next(iter(extra))}=...; allowed keywords: {allowed}")
        if kind is not None and kind not in ("processor", "selector"):
            raise PluginError(f"kind={kind!r} is invalid; allowed: 'processor', 'selector'")
    except PluginError as exc:
        raise PluginError(f"{category} {name!r}: {exc}") from None
    if category == "sampler" and kind is None:
        kind = "processor"
    entry = Entry(category, name, impl, model, description, distribution, version, kind)  # type: ignore[arg-type]
    if not isinstance(impl, str):  # an object: its declaration can be checked now
        entry.load()
    return entry

"""`decodekit plugins` and `decodekit samplers` (samplers, cache backends, strategies and models, each with its
parameters; `decodekit caches`, `strategies` and `models` list one of those sections): the registry as plain data, and
as rich tables.

Building the reports imports no torch (plugins register by import path); resolving a sampler's
kind may import its module when the plugin did not declare it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pydantic.fields import FieldInfo
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from decodekit.errors import PluginError, UnknownNameError, did_you_mean
from decodekit.param_types import interval_text, shown, type_text
from decodekit.params import Params, allowed_values, bound_words
from decodekit.plugins import get_registry, sampler_entry
from decodekit.registry import CATEGORIES, NO_ENTRY_POINT, Category, Entry, Registry, without_entry_point
from decodekit.standard_plugins import STANDARD_PLUGINS, switched_off
from decodekit_cli.console import stdout_console
from decodekit_cli.options import standard_words

__all__ = [
    "bounds_text",
    "check_imports",
    "plugins_report",
    "render_plugins",
    "render_samplers",
    "samplers_report",
    "section_report",
]

SECTIONS: dict[Category, str] = {
    "sampler": "samplers",
    "cache backend": "cache_backends",
    "strategy": "strategies",
    "model": "models",
}
"""Each category's key in a report, in the order the listing shows them."""
NO_CACHE = "none"  # a cache backend no plugin registers: --cache none recomputes the whole context
NO_CACHE_REPORT: dict[str, Any] = {
    "name": NO_CACHE,
    "description": "No cache: recompute the whole context every step",
    "distribution": "",
    "version": "",
    "params": [],
}


def plugins_report(check: bool = False) -> dict[str, Any]:
    """Each loaded plugin distribution with what it registers, each that failed, the names two
    distributions register, and (`check`) the implementations registered by import path: those that
    imported and those that did not."""
    registry = get_registry()
    report: dict[str, Any] = {
        "plugins": [asdict(info) for info in registry.plugins.values()],
        "failures": [asdict(failure) for failure in registry.failures],
        "conflicts": [{**asdict(c), "error": c.message()} for c in registry.conflicts],
        "no_entry_point": [{"distribution": d, "error": NO_ENTRY_POINT} for d in without_entry_point()],
        "disabled": [
            {"distribution": d, "version": v, "enable": switched_off([d])} for d, v in registry.disabled.items()
        ],
    }
    if check:
        report["imported"], report["broken"] = check_imports(registry)
    return report


def check_imports(registry: Registry) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Import every implementation registered by path: (those that imported, those that did not, with why)."""
    imported, broken = [], []
    for category in CATEGORIES:
        for entry in registry.section(category).values():
            if isinstance(entry.impl, str):
                row = {"category": category, "name": entry.name, "distribution": entry.distribution, "impl": entry.impl}
                try:
                    entry.load()
                except PluginError as exc:
                    broken.append({**row, "error": str(exc)})
                else:
                    imported.append(row)
    return imported, broken


def _param_report(name: str, field: FieldInfo, schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter: readable `type` and `bounds`, its JSON Schema, default and description."""
    required = field.is_required()
    kind = type_text(field.annotation)
    own = field.json_schema_extra.get("allowed") if isinstance(field.json_schema_extra, dict) else None
    # A field's own `allowed` says what a check no bound shows (hf's device pattern) allows, as its errors do.
    bounds = own if isinstance(own, str) else bounds_text(field.metadata, name, field.annotation)
    return {
        "name": name,
        "type": kind,
        "bounds": bounds,
        "allowed": allowed_values(name, field),  # as error messages write it
        "required": required,
        "default": None if required else _as_list(field.get_default(call_default_factory=True)),
        "description": field.description or "",
        "schema": schema,
    }


def bounds_text(metadata: Iterable[object], name: str, annotation: object = None) -> str:
    """A parameter's own constraints: `0 < p ≤ 1, finite`, `non-empty`, `matches '^[a-z]+$'`; empty when it has
    none. The words after the interval are the ones its errors give (`bound_words`)."""
    return ", ".join(filter(None, [interval_text(metadata, name), *bound_words(metadata, annotation)]))


def _as_list(value: Any) -> Any:
    """Tuples as lists: how JSON and chain strings write them."""
    return [_as_list(v) for v in value] if isinstance(value, (tuple, list)) else value


def _params_report(model: type[Params]) -> list[dict[str, Any]]:
    properties = model.model_json_schema().get("properties", {})
    return [_param_report(k, f, properties.get(k, {})) for k, f in model.model_fields.items()]


def samplers_report(names: Sequence[str] = ()) -> dict[str, Any]:
    """Every registered sampler, cache backend, strategy and model with its parameters, or only those named."""
    registry = get_registry()
    names = list(dict.fromkeys(names))  # a name given twice is listed once, where it first appears
    for name in names:
        known = (registry.caches, registry.strategies, registry.models)
        if name != NO_CACHE and not any(name in section for section in known):
            _check_sampler(name, registry)

    return {key: _listed(registry, category, names) for category, key in SECTIONS.items()}


def section_report(category: Category, names: Sequence[str] = ()) -> dict[str, Any]:
    """One category's entries with their parameters (`decodekit caches`, `strategies`, `models`), or only those
    named; a name the category lacks is an error listing the category's names, as `--cache` or `--strategy` says."""
    registry = get_registry()
    names = list(dict.fromkeys(names))
    also = (NO_CACHE,) if category == "cache backend" else ()
    for name in names:
        if name not in also:
            registry.lookup(category, name, also)
    return {SECTIONS[category]: _listed(registry, category, names)}


def _listed(registry: Registry, category: Category, names: Sequence[str]) -> list[dict[str, Any]]:
    """The category's entries named, in the order named (without names: all of them, by name); the cache
    backends start with `none`, which no plugin registers but `--cache` takes."""
    section: Mapping[str, Entry] = registry.section(category)
    built_in = {NO_CACHE: NO_CACHE_REPORT} if category == "cache backend" else {}
    listed = [n for n in names or [*built_in, *sorted(section)] if n in section or n in built_in]
    return [built_in[n] if n in built_in else _entry_report(section[n]) for n in listed]


def _check_sampler(name: str, registry: Registry) -> None:
    """A name two plugins register is a PluginError; an unknown one lists every installed name."""
    try:
        sampler_entry(name)
    except UnknownNameError:
        if name in STANDARD_PLUGINS:  # a standard name: why it is missing, not a close name
            raise UnknownNameError(standard_words(name)) from None
        known = [*registry.samplers, *registry.caches, *registry.strategies, *registry.models]
        # A plugin that failed to load registered nothing: said here too, as the name may be one of its.
        raise UnknownNameError(
            f"unknown name {name!r}; allowed: a sampler, cache backend, strategy or model, as `decodekit samplers` "
            f"lists them{registry.unregistered}{did_you_mean(name, known)}"
        ) from None


def _entry_report(e: Entry) -> dict[str, Any]:
    """One registered thing; a sampler's kind (declared at registration) after its name."""
    return {
        "name": e.name,
        **({"kind": e.kind} if e.category == "sampler" else {}),
        "description": e.description,
        "distribution": e.distribution,
        "version": e.version,
        "params": _params_report(e.params_model),
    }


def _plain(*cells: str) -> list[Text]:
    """Table cells shown as given: plugin texts may contain `[...]`, which rich would read as markup."""
    return [Text(c) for c in cells]


def _registers(p: dict[str, Any]) -> str:
    kinds = ("samplers", "cache_backends", "models", "strategies")
    lines = [f"{key.replace('_', ' ')}: {', '.join(p[key])}" for key in kinds if p[key]]
    return "\n".join(lines) or "nothing"


def render_plugins(report: dict[str, Any]) -> None:
    console = stdout_console()
    table = Table(title="Plugins", title_justify="left", title_style="bold")
    table.add_column("distribution", no_wrap=True, style="bold cyan")
    table.add_column("version", no_wrap=True)
    table.add_column("registers")
    for p in report["plugins"]:
        table.add_row(*_plain(p["distribution"], p["version"], _registers(p)))
    console.print(table)
    problems = [
        ("Failed to load", ("distribution", "entry_point", "hook", "error"), report["failures"]),
        ("Names registered twice (unusable)", ("category", "name", "distributions", "error"), report["conflicts"]),
        ("Broken implementations", ("distribution", "category", "name", "error"), report.get("broken", [])),
        ("Installed without an entry point", ("distribution", "error"), report["no_entry_point"]),
    ]
    for title, columns, rows in problems:
        if rows:
            console.print(_problem_table(title, columns, rows))
    if report["disabled"]:  # chosen, not a problem: no red
        disabled = ("Installed but disabled", ("distribution", "version", "enable"), report["disabled"])
        console.print(_problem_table(*disabled, style="bold"))
    if "imported" in report:
        console.print(_check_summary(report["imported"], report["broken"]))


def _check_summary(imported: list[dict[str, Any]], broken: list[dict[str, Any]]) -> Text:
    """What `--check` found: how many implementations registered by path imported, per category, and how
    many did not."""
    counts = Counter(item["category"] for item in imported)
    plural = {"sampler": "samplers", "cache backend": "cache backends", "model": "models", "strategy": "strategies"}
    per = ", ".join(f"{n} {c if n == 1 else plural[c]}" for c in CATEGORIES if (n := counts[c]))
    did = f"{len(imported)} imported ({per})" if imported else "none imported"
    text = Text(f"Checked {len(imported) + len(broken)} implementations registered by import path: {did}")
    if broken:
        text.append(f"; {len(broken)} did not (Broken implementations above)", style="bold red")
    return text


def _problem_table(title: str, columns: tuple[str, ...], rows: list[dict[str, Any]], style: str = "red") -> Table:
    table = Table(title=title, title_justify="left", title_style=f"bold {style}")
    for column in columns[:-1]:
        table.add_column(column.replace("_", " "), style="bold", overflow="fold")
    table.add_column(columns[-1], style=style, overflow="fold")  # a narrow terminal wraps the fix, never cuts it
    for row in rows:
        cells = [row.get(c) for c in columns]
        table.add_row(*_plain(*(", ".join(c) if isinstance(c, list) else str(c or "") for c in cells)))
    return table


def _default(p: dict[str, Any]) -> str:
    return "required" if p["required"] else f"default {shown(p['default'])}"  # null, true: as its type says


def _indented(renderable: RenderableType, by: int) -> Padding:
    return Padding(renderable, (0, 0, 0, by), expand=False)


def _param_line(p: dict[str, Any]) -> Text:
    """`name  type  bounds  default`: words that wrap at any width, never cut."""
    return Text.assemble(
        (p["name"], "green"), "  ", p["type"], *(("  ", p["bounds"]) if p["bounds"] else ()), "  ", (_default(p), "dim")
    )


def _render_block(console: Console, header: Text, item: dict[str, Any]) -> None:
    """A sampler, cache backend, strategy or model: its header line, its description, then each parameter
    with type, bounds and default on one line and its meaning below (every line wraps, none is cut)."""
    console.print(header)
    if item["description"]:
        console.print(_indented(Text(item["description"]), 2))
    for p in item.get("params", []):
        console.print(_indented(_param_line(p), 4))
        if p["description"]:
            console.print(_indented(Text(p["description"], style="dim"), 6))


def _header(item: dict[str, Any], kind: str = "") -> Text:
    where = " ".join(filter(None, [item["distribution"], item.get("version", "")]))
    return Text.assemble((item["name"], "bold cyan"), "  " + " · ".join(filter(None, [kind, where])))


def render_samplers(report: dict[str, Any]) -> None:
    """One block per sampler, then per cache backend, decode strategy and model: those in the report, under
    a title each."""
    console = stdout_console()
    sections = [
        ("Samplers", report.get("samplers", [])),
        ("Cache backends", report.get("cache_backends", [])),
        ("Decode strategies", report.get("strategies", [])),
        ("Models", report.get("models", [])),
    ]
    for i, (title, items) in enumerate((t, items) for t, items in sections if items):
        if i:
            console.print()
        console.print(Text(title, style="bold"))
        for item in items:
            _render_block(console, _header(item, item.get("kind", "")), item)

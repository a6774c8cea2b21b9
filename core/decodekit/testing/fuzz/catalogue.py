"""The samplers to fuzz, read from the registry: a newly installed plugin's samplers are covered
without a line of fuzz code."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from decodekit.errors import ParameterError
from decodekit.params import NoParams
from decodekit.plugins import get_registry

__all__ = ["SamplerInfo", "params_model", "registered_samplers"]


@dataclass(frozen=True)
class SamplerInfo:
    name: str
    kind: str  # "processor" or "selector"
    params_model: type[BaseModel]


def params_model(entry: object) -> type[BaseModel]:
    """A registry entry's parameter model (`NoParams` for an entry without one)."""
    # Under its old name (`params_model`) or a generic registry's (`params`).
    for attr in ("params_model", "params"):
        model = getattr(entry, attr, None)
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model
    return NoParams


def registered_samplers(names: tuple[str, ...] | None = None) -> tuple[SamplerInfo, ...]:
    """Every registered sampler (or those in `names`), sorted by name, its kind its registration's (nothing is
    imported: one whose import path is broken is drawn, and the fuzz reports its `PluginError`). A name nothing
    registers is an `UnknownNameError`, one two plugins register a `PluginError`: dropped, it would leave a fuzz that
    passes without ever drawing the sampler meant."""
    if isinstance(names, str):  # else read as names one letter long
        raise ParameterError(
            f"registered_samplers: names={names!r} is a string; allowed: a tuple of sampler names, ({names!r},)"
        )
    registry = get_registry()
    for name in names or ():
        registry.lookup("sampler", name)
    return tuple(
        SamplerInfo(name, str(getattr(entry, "kind", "processor")), params_model(entry))
        for name, entry in sorted(registry.samplers.items())
        if names is None or name in names
    )

"""One spelling for each thing a batch job's record names, so `--resume` compares what was meant, not what was
typed: `hf(dtype = auto):ckpt` is `hf:ckpt`, `window(64)` is `window(size=64)`, a strategy's draft model is spelt
as the model is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from decodekit.chain_string import StageCall, parse_model, parse_stage
from decodekit.params import Params
from decodekit.plugins import bind_arguments, get_registry
from decodekit.registry import Category

__all__ = ["canonical_model", "canonical_stage"]


def _call_text(name: str, params: Params) -> str:
    """`name(key=value, ...)`, the values as the chain's string form writes them, defaults left out."""
    values = ", ".join(f"{k}={v!r}" for k, v in _given(params).items())
    return f"{name}({values})" if values else name


def _given(params: Params) -> dict[str, Any]:
    """The values other than the defaults; a parameter that names a registered model (marked
    `json_schema_extra={"format": "model"}`, as speculative's `draft`) spelt as `canonical_model` spells it."""
    values = params.model_dump(exclude_defaults=True)
    for key, value in values.items():
        extra = type(params).model_fields[key].json_schema_extra
        if isinstance(extra, dict) and extra.get("format") == "model" and _registered_model(value):
            values[key] = canonical_model(value)
    return values


def _registered_model(value: object) -> bool:
    """Whether `value` is a model string whose name is registered (a marked parameter may take other values)."""
    return isinstance(value, str) and re.split(r"[(:]", value, maxsplit=1)[0] in get_registry().models


def _validated(category: Category, call: StageCall) -> Params:
    entry = get_registry().lookup(category, call.name)
    return bind_arguments(f"{category} {call.name}", entry.params_model, tuple(call.args), call.kwargs)


def canonical_model(name: str) -> str:
    """The loader's parameters validated, defaults left out, and a loader argument that names an existing file or
    folder made absolute (symlinks resolved), so the record, and Ray actors, mean the same files from anywhere."""
    prefix, sep, after = name.partition(":")
    call, argument = parse_model(name) if "(" in prefix else (StageCall(prefix, [], {}), after if sep else None)
    if argument and (path := Path(argument).expanduser()).exists():
        argument = str(path.resolve())
    return _call_text(call.name, _validated("model", call)) + ("" if argument is None else f":{argument}")


def canonical_stage(category: Category, text: str) -> str:
    """A cache backend or a strategy, `name(args)`, with its parameters validated and defaults left out."""
    if category == "cache backend" and text == "none":  # no cache: no backend to look up
        return text
    call = parse_stage(text, what=category)
    return _call_text(call.name, _validated(category, call))

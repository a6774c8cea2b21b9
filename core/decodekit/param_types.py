"""Parameter types as a reader writes them: `list[int ≥ 0]`, `dict[int, float]`, `int | None`.

Built from the annotation and its declared constraints (the same `Field(ge=..)` metadata that
validation uses), so the listing cannot say something other than the check. A type may name itself
(`shown_as`, as speculative's `ModelObject` does).
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

__all__ = ["constraints", "interval_text", "type_text"]

_SEQUENCES = (tuple, list, set, frozenset, Sequence)


def constraints(metadata: Iterable[object]) -> list[object]:
    """Flatten pydantic's `FieldInfo` (what `Annotated[int, Field(ge=0)]` carries) into constraints."""
    return [c for m in metadata for c in (m.metadata if isinstance(m, FieldInfo) else [m])]


def _number(value: object) -> str:
    if isinstance(value, int) and value >= 2**32 and value & (value - 1) == 0:  # 2**63, not 19 digits
        return f"2**{value.bit_length() - 1}"
    return repr(value) if not isinstance(value, float) or not value.is_integer() else str(int(value))


def interval_text(metadata: Iterable[object], name: str = "") -> str:
    """`0 < p ≤ 1` with a name; `in (0, 1]` or `≥ 0` without."""
    lower = upper = None  # (with a name, open/closed bracket, alone, the number)
    for m in constraints(metadata):
        if isinstance(m, annotated_types.Gt):
            lower = (f"{_number(m.gt)} <", "(", f"> {_number(m.gt)}", _number(m.gt))
        elif isinstance(m, annotated_types.Ge):
            lower = (f"{_number(m.ge)} ≤", "[", f"≥ {_number(m.ge)}", _number(m.ge))
        elif isinstance(m, annotated_types.Lt):
            upper = (f"< {_number(m.lt)}", ")", f"< {_number(m.lt)}", _number(m.lt))
        elif isinstance(m, annotated_types.Le):
            upper = (f"≤ {_number(m.le)}", "]", f"≤ {_number(m.le)}", _number(m.le))
    if name and (lower or upper):
        return " ".join(filter(None, [lower and lower[0], name, upper and upper[0]]))
    if lower and upper:
        return f"in {lower[1]}{lower[3]}, {upper[3]}{upper[1]}"
    return (lower or upper or ("", "", "", ""))[2]


def type_text(annotation: Any, metadata: Iterable[object] = ()) -> str:
    """A readable type; constraints of nested items are written next to them (`int ≥ 0`)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_text(args[0], [*args[1:], *metadata])
    if origin in (Union, types.UnionType):
        members = [type_text(a) for a in args if a is not type(None)]
        return " | ".join([*members, "None"] if type(None) in args else members)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in _SEQUENCES:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            base = f"tuple[{', '.join(type_text(a) for a in args)}]"  # a fixed-length pair
        else:
            base = f"list[{type_text(args[0]) if args else 'Any'}]"  # JSON and chain strings give lists
    elif origin in (dict, Mapping):
        base = f"dict[{', '.join(type_text(a) for a in args)}]" if args else "dict"
    elif annotation is None or annotation is type(None):
        base = "None"
    else:
        name = getattr(annotation, "shown_as", None) or getattr(annotation, "__name__", None)
        base = str(name) if name else str(annotation).replace("typing.", "")
    interval = interval_text(metadata)
    return f"{base} {interval}" if interval else base

"""Parameter types as a user writes them: `a list of integers ≥ 0`, `an object mapping integers to numbers`,
`an integer, or null`; and values as errors show them.

Built from the annotation and its declared constraints (the same `Field(ge=..)` metadata that
validation uses), so the listing cannot say something other than the check. A type may name itself
(`shown_as`, as speculative's `ModelObject` does). JSON lines, JSON chain specs and chain strings write
null, true, false and objects; Python writes None, True, False and dicts: the command line runs in
`json_words()`, so its errors say the former, Python's the latter.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Annotated, Any, Literal, NamedTuple, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

__all__ = [
    "bound_words",
    "constraints",
    "interval_text",
    "json_words",
    "number_text",
    "shown",
    "type_members",
    "type_text",
    "words",
]

_SEQUENCES = (tuple, list, set, frozenset, Sequence)
_JSON_WORDS: ContextVar[bool] = ContextVar("decodekit_json_words", default=False)


@contextlib.contextmanager
def json_words() -> Iterator[None]:
    """Errors raised in the block say null, true, false and "an object" (the command line's users write JSON
    and chain strings), not None, True, False and "a dict"."""
    token = _JSON_WORDS.set(True)
    try:
        yield
    finally:
        _JSON_WORDS.reset(token)


def words(python: str, json: str) -> str:
    """`python` or `json`, whichever the caller's user writes (`json_words`)."""
    return json if _JSON_WORDS.get() else python


def shown(value: object) -> str:
    """A value as an error shows it: its repr; where the user writes JSON, with null, true and false and a list
    where Python has a tuple (strings quoted as pydantic's messages quote them, which chain strings read too)."""
    if not _JSON_WORDS.get():
        return repr(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(shown, value))}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{shown(k)}: {shown(v)}" for k, v in value.items()) + "}"
    return repr(value)


def constraints(metadata: Iterable[object]) -> list[object]:
    """Flatten pydantic's `FieldInfo` (what `Annotated[int, Field(ge=0)]` carries) into constraints."""
    return [c for m in metadata for c in (m.metadata if isinstance(m, FieldInfo) else [m])]


def number_text(value: object) -> str:
    """A bound as a user writes it: `2**63`, not 19 digits; `10000`, not `10000.0`."""
    if isinstance(value, int) and value >= 2**32 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return repr(value) if not isinstance(value, float) or not value.is_integer() else str(int(value))


def interval_text(metadata: Iterable[object], name: str = "") -> str:
    """`0 < p ≤ 1` with a name; `in (0, 1]` or `≥ 0` without."""
    lower = upper = None  # (with a name, open/closed bracket, alone, the number)
    for m in constraints(metadata):
        if isinstance(m, annotated_types.Gt):
            lower = (f"{number_text(m.gt)} <", "(", f"> {number_text(m.gt)}", number_text(m.gt))
        elif isinstance(m, annotated_types.Ge):
            lower = (f"{number_text(m.ge)} ≤", "[", f"≥ {number_text(m.ge)}", number_text(m.ge))
        elif isinstance(m, annotated_types.Lt):
            upper = (f"< {number_text(m.lt)}", ")", f"< {number_text(m.lt)}", number_text(m.lt))
        elif isinstance(m, annotated_types.Le):
            upper = (f"≤ {number_text(m.le)}", "]", f"≤ {number_text(m.le)}", number_text(m.le))
    if name and (lower or upper):
        return " ".join(filter(None, [lower and lower[0], name, upper and upper[0]]))
    if lower and upper:
        return f"in {lower[1]}{lower[3]}, {upper[3]}{upper[1]}"
    return (lower or upper or ("", "", "", ""))[2]


def bound_words(metadata: Iterable[object], annotation: object) -> list[str]:
    """The constraints no interval shows, as `decodekit samplers` and errors write them: `non-empty`, `at least
    2 items`, `at most 8 characters`, `finite`, `matches '^[a-z]+$'`."""
    unit = "character" if str in type_members(annotation) else "item"
    found = []
    for m in constraints(metadata):
        if isinstance(m, annotated_types.MinLen) and m.min_length > 0:
            n = m.min_length
            found.append("non-empty" if n == 1 else f"at least {n} {unit}s")
        elif isinstance(m, annotated_types.MaxLen):
            found.append(f"at most {m.max_length} {unit}{'' if m.max_length == 1 else 's'}")
        elif getattr(m, "allow_inf_nan", None) is False:
            found.append("finite")
        if (pattern := getattr(m, "pattern", None)) is not None:  # Field(pattern=...): a str or a compiled regex
            found.append(f"matches '{getattr(pattern, 'pattern', pattern)}'")
    return found


def type_members(ann: object) -> list[object]:
    """The types a parameter takes: a union's members, each without its `Annotated` constraints."""
    origin = get_origin(ann)
    if origin is Annotated:
        return type_members(get_args(ann)[0])
    if origin is Union or origin is types.UnionType:
        return [m for a in get_args(ann) for m in type_members(a)]
    return [ann]


def type_text(annotation: Any, metadata: Iterable[object] = ()) -> str:
    """A type as a user writes its values: `an integer`, `a list of 2 numbers`, `a non-empty list of integers
    in [0, 2**63)`, `an object`; the constraints of nested items are written with them."""
    return _noun(annotation, list(metadata)).one


class _Noun(NamedTuple):
    one: str  # with its article: "an integer"
    many: str  # "integers"


def _either(texts: list[str]) -> str:
    return " or ".join(texts) if len(texts) < 3 else f"{', '.join(texts[:-1])} or {texts[-1]}"


def _counted(one: str, many: str, metadata: list[object], annotation: object) -> _Noun:
    """`one` and `many` with the bounds `metadata` declares: `a non-empty list of ...`, `a finite number ≥ 0`."""
    interval = interval_text(metadata)
    said = [w for w in bound_words(metadata, annotation) if not (w == "finite" and interval.startswith("in "))]
    before = "".join(f"{w} " for w in said if w in ("non-empty", "finite"))  # nan and ±inf lie outside an interval
    rest = ", ".join(w for w in said if w not in ("non-empty", "finite"))
    after = "".join(f" {w}" for w in [interval, rest and f"({rest})"] if w)
    article = "an" if (before or one)[0] in "aeiou" else "a"
    return _Noun(f"{article} {before}{one}{after}", f"{before}{many}{after}")


def _values(annotation: Any) -> list[str]:
    """The values a bool or a literal takes, as the user writes them; none for another type."""
    values = (True, False) if annotation is bool else get_args(annotation) if get_origin(annotation) is Literal else ()
    return [shown(v) for v in values]


def _noun(annotation: Any, metadata: list[object]) -> _Noun:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _noun(args[0], [*args[1:], *metadata])
    if origin is Union or origin is types.UnionType:  # null last: "an integer or null"
        members = sorted(args, key=lambda a: a is type(None))
        ones = [one for a in members for one in (_values(a) or [_noun(a, []).one])]  # "true, false or 'never'"
        return _Noun(_either(ones), _either([_noun(a, []).many for a in members]))
    if values := _values(annotation):
        return _Noun(_either(values), "booleans" if annotation is bool else _either(values))
    if annotation is None or annotation is type(None):
        null = words("None", "null")
        return _Noun(null, f"{null}s")
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):  # a fixed-length pair
            items = [_noun(a, []) for a in args]
            if len({n.many for n in items}) == 1:
                one, many = f"list of {len(args)} {items[0].many}", f"lists of {len(args)} {items[0].many}"
            else:
                kind = "pair" if len(args) == 2 else "list"
                one, many = (f"{k} [{', '.join(n.one for n in items)}]" for k in (kind, f"{kind}s"))
        else:
            item = f" of {_noun(args[0], []).many}" if args and args[0] is not Any else ""
            one, many = f"list{item}", f"lists{item}"
    elif origin in (dict, Mapping) or annotation in (dict, Mapping):
        kind = words("dict", "object")
        if len(args) == 2 and args[1] is not Any:
            keys, targets = (_noun(a, []).many for a in args)
            one, many = f"{kind} mapping {keys} to {targets}", f"{kind}s mapping {keys} to {targets}"
        else:
            one, many = kind, f"{kind}s"
    elif annotation is Any:
        return _Noun("any value", "any values")
    else:
        name = getattr(annotation, "shown_as", None)
        nouns = {int: ("integer", "integers"), float: ("number", "numbers"), str: ("string", "strings")}
        one, many = nouns.get(annotation) or (str(name or getattr(annotation, "__name__", annotation)),) * 2
        if name is None and annotation not in nouns:  # a class of its own: its name, as it is
            return _Noun(one, many)
    return _counted(one, many, metadata, annotation)

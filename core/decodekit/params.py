"""Parameter models: pydantic, bounds declared once, errors that name parameter, value and range."""

from __future__ import annotations

import functools
import operator
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from decodekit.errors import ParameterError, did_you_mean
from decodekit.param_types import bound_words, number_text, shown, type_members, type_text, words

__all__ = ["NoParams", "Params", "allowed_values", "bound_words", "validate_params"]


class Params(BaseModel):
    """Base of every sampler's parameter model: unknown keys are errors, instances are immutable, and a
    number parameter takes numbers only (pydantic would read `True` as 1 and `"2"` as 2), an integer parameter
    integers only (it would read 2.0 as 2: `top_k(k=2.0)` is a float, as in Python)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors: list[Any] = [
                {"type": _NOT_AN_INTEGER if isinstance(value, float) else _NOT_A_NUMBER, "loc": loc, "input": value}
                for name, field in cls.model_fields.items()
                if name in data
                for loc, value in _not_numbers(field.annotation, data[name], (name,))
            ]
            if errors:
                raise ValidationError.from_exception_data(cls.__name__, errors)
        return data


class NoParams(Params):
    """For samplers that take no parameters."""


_NOT_A_NUMBER = PydanticCustomError("number_type", "Input should be a number, not a bool or a string")
_NOT_AN_INTEGER = PydanticCustomError("int_type", "Input should be an integer (no decimal point or exponent)")


def _takes(member: object, value: bool | str | float) -> bool:
    """Whether `member` takes `value` as it is: the bool, str or float type itself, or a literal of that value."""
    if typing.get_origin(member) is typing.Literal:
        return any(type(v) is type(value) and v == value for v in typing.get_args(member))
    return member is type(value)


def _not_numbers(ann: object, value: object, loc: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], object]]:
    """Where in `value` a number is given as a bool or a string, or an integer as a float: the value itself, or an
    item of a list, tuple or dict value that a container type of `ann` reads as a number (`[8, True]` for
    `list[int]`). Dict keys are left alone: JSON writes every key as a string."""
    if isinstance(value, (bool, str, float)):  # refused where `ann` takes a number and takes it in no other way
        members = type_members(ann)  # (`int | str` takes "a"; `int | Literal["auto"]` takes "auto")
        numbers = (int,) if isinstance(value, float) else (int, float)
        number = any(m in numbers for m in members) and not any(_takes(m, value) for m in members)
        return [(loc, value)] if number else []
    found: list[list[tuple[tuple[Any, ...], object]]] = []  # per container member that takes `value`
    for member in type_members(ann):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if origin in (list, tuple, set, frozenset, Sequence) and isinstance(value, (list, tuple)) and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                if len(args) != len(value):
                    continue  # a pair given three items: pydantic says so
                items = list(zip(args, value))
            else:
                items = [(args[0], v) for v in value]
            found.append([bad for i, (a, v) in enumerate(items) for bad in _not_numbers(a, v, (*loc, i))])
        elif origin in (dict, Mapping) and isinstance(value, Mapping) and len(args) == 2:
            found.append([bad for k, v in value.items() for bad in _not_numbers(args[1], v, (*loc, k))])
    # Refused only when every container type that could take it refuses it (`list[int] | list[str]` takes "a").
    return [] if not found or any(not f for f in found) else found[0]


def allowed_values(name: str, field: FieldInfo) -> str:
    """What `field` accepts, as the user writes it, built from its declared bounds (`a number 0 < p <= 1`,
    `a list of integers, non-empty`, `an integer 1 <= n, or null`), or the field's own
    (`json_schema_extra={"allowed": ...}`) where a check no bound shows needs its own words."""
    own = field.json_schema_extra.get("allowed") if isinstance(field.json_schema_extra, dict) else None
    if isinstance(own, str):
        return own
    lower = upper = ""
    for m in field.metadata:
        if isinstance(m, annotated_types.Gt):
            lower = f"{number_text(m.gt)} < "
        elif isinstance(m, annotated_types.Ge):
            lower = f"{number_text(m.ge)} <= "
        elif isinstance(m, annotated_types.Lt):
            upper = f" < {number_text(m.lt)}"
        elif isinstance(m, annotated_types.Le):
            upper = f" <= {number_text(m.le)}"
    args = typing.get_args(field.annotation) if _is_union(field.annotation) else (field.annotation,)
    members = [m for m in args if m is not type(None)]
    optional = len(members) < len(args)  # `int | None`: null comes last, "an integer 1 <= n, or null"
    annotation = members[0] if len(members) == 1 else functools.reduce(operator.or_, members)
    allowed = f"{type_text(annotation)} {lower}{name}{upper}" if lower or upper else type_text(annotation)
    # Between two bounds "finite" says nothing more: nan and ±inf lie outside any such interval.
    said = [w for w in bound_words(field.metadata, field.annotation) if not (w == "finite" and lower and upper)]
    return ", ".join([allowed, *said, *([f"or {words('None', 'null')}"] if optional else [])])


def validate_params(owner: str, model: type[Params], values: Mapping[str, Any]) -> Params:
    """Build `model` from `values`, turning pydantic's report into one clear `ParameterError`."""
    fields = model.model_fields
    if unknown := [k for k in values if k not in fields]:
        allowed = ", ".join(fields) or "none"
        k = unknown[0]
        raise ParameterError(
            f"{owner}: unknown parameter {k}={shown(values[k])}; allowed parameters: {allowed}{did_you_mean(k, fields)}"
        )
    try:
        return model(**values)
    except ValidationError as exc:
        errors = exc.errors()
    problems: dict[str, str] = {}  # by location; a union reports one error per member, shown as one
    locs = [tuple(err["loc"]) for err in errors]
    for err in errors:
        if any(len(other) > len(err["loc"]) > 0 and other[: len(err["loc"])] == err["loc"] for other in locs):
            continue  # a list that came out short because an item of it failed: the item's error says why
        where, problem = _problem(err, fields, values)
        problems[where] = problem
    raise ParameterError(f"{owner}: " + "; ".join(problems.values())) from None


def _problem(err: ErrorDetails, fields: Mapping[str, FieldInfo], values: Mapping[str, Any]) -> tuple[str, str]:
    """One of pydantic's errors as (where, what is wrong and what is allowed); a union's members share a where."""
    loc = ".".join(str(p) for p in err["loc"])
    key = str(err["loc"][0]) if err["loc"] else ""
    field = fields.get(key)
    if not err["loc"]:  # a validator across parameters: name them, and its rule
        given = ", ".join(f"{k}={shown(v)}" for k, v in values.items()) or "the defaults"
        rule = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return loc, f"{given} {'is invalid' if len(values) == 1 else 'are invalid together'}: {rule}"
    if err["type"] == "missing":  # a parameter's own (not an item's inside one) says what it takes
        allowed = f"; allowed: {allowed_values(key, field)}" if field is not None and len(err["loc"]) == 1 else ""
        return loc, f"missing required parameter {loc}{allowed}"
    if field is not None and _is_union_member(err["loc"], field):
        return key, f"{key}={shown(values.get(key))} is invalid; allowed: {allowed_values(key, field)}"
    # An item of a list or dict parameter (`breakers.0.1`; a dict key's own error `bias key`) is
    # described by the parameter's whole type, its items' bounds written in it.
    nested = len(err["loc"]) > 1
    if err["loc"][-1] == "[key]":
        loc = loc.removesuffix(f".{err['loc'][-2]}.[key]") + " key"
    allowed = "" if field is None else f"; allowed: {f'{key}: ' if nested else ''}{allowed_values(key, field)}"
    return loc, f"{loc}={shown(err.get('input'))} is invalid: {_message(err)}{allowed}"


def _message(err: ErrorDetails) -> str:
    """Pydantic's message in a user's words: a tuple or set parameter is a list in JSON and chain strings
    ("Tuple should have at least 1 item after validation" named a type the user never wrote)."""
    ctx = err.get("ctx") or {}
    if err["type"] in ("too_short", "too_long"):
        short = err["type"] == "too_short"
        most, n = ("at least", ctx.get("min_length")) if short else ("at most", ctx.get("max_length"))
        got = "" if ctx.get("actual_length") is None else f", not {ctx['actual_length']}"
        return f"Input should have {most} {n} item{'' if n == 1 else 's'}{got}"
    if err["type"] in ("tuple_type", "set_type", "frozen_set_type"):
        return "Input should be a list"
    if err["type"] in _JSON_MESSAGES:  # pydantic's Python words ("a valid dictionary") in JSON's
        return words(str(err["msg"]), _JSON_MESSAGES[err["type"]])
    return str(err["msg"]).removeprefix("Value error, ")


def _is_union(annotation: object) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


_JSON_MESSAGES = {
    "dict_type": "Input should be an object",
    "bool_type": "Input should be true or false",
    "bool_parsing": "Input should be true or false",
    "none_required": "Input should be null",
}


def _is_union_member(loc: tuple[int | str, ...], field: FieldInfo) -> bool:
    """Pydantic locates a union member's error as (parameter, member tag, ...: inside that member)."""
    return len(type_members(field.annotation)) > 1 and len(loc) >= 2 and isinstance(loc[1], str)

"""Parameter models: pydantic, bounds declared once, errors that name parameter, value and range."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from decodekit.errors import ParameterError, did_you_mean
from decodekit.param_types import constraints, type_text

__all__ = ["NoParams", "Params", "allowed_values", "bound_words", "validate_params"]


class Params(BaseModel):
    """Base of every sampler's parameter model: unknown keys are errors, instances are immutable, and a
    number parameter takes numbers only (pydantic would read `True` as 1 and `"2"` as 2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            errors: list[Any] = [
                {"type": _NOT_A_NUMBER, "loc": loc, "input": value}
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


def _members(ann: object) -> list[object]:
    """The types a parameter takes: a union's members, each without its `Annotated` constraints."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _members(typing.get_args(ann)[0])
    if origin is typing.Union or type(ann).__name__ == "UnionType":
        return [m for a in typing.get_args(ann) for m in _members(a)]
    return [ann]


def _takes(member: object, value: bool | str) -> bool:
    """Whether `member` takes `value` as it is: the bool or str type itself, or a literal of that value."""
    if typing.get_origin(member) is typing.Literal:
        return any(type(v) is type(value) and v == value for v in typing.get_args(member))
    return member is type(value)


def _not_numbers(ann: object, value: object, loc: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], object]]:
    """Where in `value` a number is given as a bool or a string: the value itself, or an item of a list,
    tuple or dict value that a container type of `ann` reads as a number (`[8, True]` for `list[int]`).
    Dict keys are left alone: JSON writes every key as a string."""
    if isinstance(value, (bool, str)):  # refused where `ann` takes a number and takes it in no other way
        members = _members(ann)  # (`int | str` takes "a"; `int | Literal["auto"]` takes "auto")
        number = any(m in (int, float) for m in members) and not any(_takes(m, value) for m in members)
        return [(loc, value)] if number else []
    found: list[list[tuple[tuple[Any, ...], object]]] = []  # per container member that takes `value`
    for member in _members(ann):
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
    """A human description of what `field` accepts, built from its declared bounds (`float 0 < p <= 1`,
    `list[int], non-empty`), or the field's own (`json_schema_extra={"allowed": ...}`) where its type reads as
    Python, not as what a user writes."""
    own = field.json_schema_extra.get("allowed") if isinstance(field.json_schema_extra, dict) else None
    if isinstance(own, str):
        return own
    lower = upper = ""
    for m in field.metadata:
        if isinstance(m, annotated_types.Gt):
            lower = f"{m.gt} < "
        elif isinstance(m, annotated_types.Ge):
            lower = f"{m.ge} <= "
        elif isinstance(m, annotated_types.Lt):
            upper = f" < {m.lt}"
        elif isinstance(m, annotated_types.Le):
            upper = f" <= {m.le}"
    type_name = type_text(field.annotation)
    if type_name.endswith(" | None"):
        type_name = f"None, or {type_name[: -len(' | None')]}"
    allowed = f"{type_name} {lower}{name}{upper}" if lower or upper else type_name
    # Between two bounds "finite" says nothing more: nan and ±inf lie outside any such interval.
    words = [w for w in bound_words(field.metadata, field.annotation) if not (w == "finite" and lower and upper)]
    return ", ".join([allowed, *words])


def bound_words(metadata: Iterable[object], annotation: object) -> list[str]:
    """The constraints no interval shows, as `decodekit samplers` and errors write them: `non-empty`, `at least
    2 items`, `at most 8 characters`, `finite`, `matches '^[a-z]+$'`."""
    unit = "character" if str in _members(annotation) else "item"
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


def validate_params(owner: str, model: type[Params], values: Mapping[str, Any]) -> Params:
    """Build `model` from `values`, turning pydantic's report into one clear `ParameterError`."""
    fields = model.model_fields
    if unknown := [k for k in values if k not in fields]:
        allowed = ", ".join(fields) or "none"
        k = unknown[0]
        raise ParameterError(
            f"{owner}: unknown parameter {k}={values[k]!r}; allowed parameters: {allowed}{did_you_mean(k, fields)}"
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
        given = ", ".join(f"{k}={v!r}" for k, v in values.items()) or "the defaults"
        rule = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return loc, f"{given} {'is invalid' if len(values) == 1 else 'are invalid together'}: {rule}"
    if err["type"] == "missing":
        return loc, f"missing required parameter {loc}"
    if field is not None and _is_union_member(err["loc"], field):
        return key, f"{key}={values.get(key)!r} is invalid; allowed: {allowed_values(key, field)}"
    # An item of a list or dict parameter (`breakers.0.1`; a dict key's own error `bias key`) is
    # described by the parameter's whole type, its items' bounds written in it.
    nested = len(err["loc"]) > 1
    if err["loc"][-1] == "[key]":
        loc = loc.removesuffix(f".{err['loc'][-2]}.[key]") + " key"
    allowed = "" if field is None else f"; allowed: {f'{key}: ' if nested else ''}{allowed_values(key, field)}"
    return loc, f"{loc}={err.get('input')!r} is invalid: {_message(err)}{allowed}"


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
    return str(err["msg"]).removeprefix("Value error, ")


def _is_union_member(loc: tuple[int | str, ...], field: FieldInfo) -> bool:
    """Pydantic locates a union member's error as (parameter, member tag, ...: inside that member)."""
    return len(_members(field.annotation)) > 1 and len(loc) >= 2 and isinstance(loc[1], str)

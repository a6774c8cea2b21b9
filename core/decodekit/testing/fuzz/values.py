"""Parameter values drawn from a sampler's pydantic model: its declared types and bounds, with the
extreme values those bounds still accept (5e-324, 3.4e38, 10**30, ids >= 2**63) drawn often, and
now and then a value the model must reject."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import annotated_types
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = ["Bounds", "invalid_values", "params_dicts", "value_strategy"]

# Floats where arithmetic breaks: the smallest denormal, float32's limits, float64's.
_EXTREME_FLOATS = (
    0.0, 5e-324, 1e-320, 1e-300, 1e-45, 1e-38, 1e-30, 1e-7, 0.01, 0.5, 1.0, 1.5, 2.0, 100.0, 700.0,
    1e4, 65504.0, 1e30, 3.4e38, 3.5e38, 1e300, 1.7976931348623157e308,
)  # fmt: skip
# Ints where arithmetic breaks: int32/int64/float64 limits, and far beyond.
_EXTREME_INTS = (0, 1, 2, 3, 5, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30)
_MAX_ITEMS = 4  # items in a drawn tuple or dict parameter


@dataclass(frozen=True)
class Bounds:
    """The bounds a field declares (`Field(ge=..., lt=..., min_length=...)`)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    min_len: int = 0
    max_len: int | None = None

    @classmethod
    def of(cls, metadata: Sequence[Any]) -> Bounds:
        lo: Any = None
        hi: Any = None
        lo_open = hi_open = False
        min_len, max_len = 0, None
        for m in metadata:
            if isinstance(m, annotated_types.Ge):
                lo = m.ge
            elif isinstance(m, annotated_types.Gt):
                lo, lo_open = m.gt, True
            elif isinstance(m, annotated_types.Le):
                hi = m.le
            elif isinstance(m, annotated_types.Lt):
                hi, hi_open = m.lt, True
            elif isinstance(m, annotated_types.MinLen):
                min_len = m.min_length
            elif isinstance(m, annotated_types.MaxLen):
                max_len = m.max_length
        return cls(lo, hi, lo_open, hi_open, min_len, max_len)

    def admits(self, x: float) -> bool:
        if self.lo is not None and (x < self.lo or (self.lo_open and x == self.lo)):
            return False
        return not (self.hi is not None and (x > self.hi or (self.hi_open and x == self.hi)))


def _flatten(annotation: Any, metadata: Sequence[Any]) -> tuple[Any, list[Any]]:
    """Strip `Annotated[...]` layers, collecting their constraints (a nested `Field(...)`'s too)."""
    meta = list(metadata)
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        for m in extra:
            meta.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return annotation, meta


def _floats(b: Bounds) -> st.SearchStrategy[float]:
    extremes = [x for v in _EXTREME_FLOATS for x in (v, -v) if b.admits(x)]
    for edge, up in ((b.lo, True), (b.hi, False)):  # the edges themselves, or the float just inside
        if edge is not None:
            x = float(edge) if b.admits(float(edge)) else math.nextafter(float(edge), math.inf if up else -math.inf)
            extremes.append(x)
    uniform = st.floats(
        min_value=b.lo, max_value=b.hi, exclude_min=b.lo_open and b.lo is not None,
        exclude_max=b.hi_open and b.hi is not None, allow_nan=False, allow_infinity=False,
    )  # fmt: skip
    return st.one_of(st.sampled_from(extremes), uniform) if extremes else uniform


def _ints(b: Bounds, vocab_size: int) -> st.SearchStrategy[int]:
    near_vocab = (vocab_size - 1, vocab_size, vocab_size + 1)  # a count or an id at the vocabulary's edge
    candidates = [x for v in (*_EXTREME_INTS, *near_vocab) for x in (v, -v) if b.admits(x)]
    lo = math.floor(b.lo) + (1 if b.lo_open else 0) if b.lo is not None else -2 * vocab_size
    hi = math.ceil(b.hi) - (1 if b.hi_open else 0) if b.hi is not None else max(lo, 0) + vocab_size - 1
    small = st.integers(lo, max(lo, hi))
    # One in four extreme: several ids in one parameter would otherwise almost always hold one.
    return st.one_of(small, small, small, st.sampled_from(candidates)) if candidates else small


def value_strategy(annotation: Any, metadata: Sequence[Any], vocab_size: int) -> st.SearchStrategy[Any]:
    """Values of type `annotation` that satisfy the constraints in `metadata` (and those it nests)."""
    annotation, meta = _flatten(annotation, metadata)
    bounds = Bounds.of(meta)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(value_strategy(a, meta, vocab_size) for a in args))  # `int | None = Field(ge=1)`
    if annotation is type(None):
        return st.none()
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return _ints(bounds, vocab_size)
    if annotation is float:
        return _floats(bounds)
    if annotation is str:
        return st.text(max_size=8)
    if origin is typing.Literal:
        return st.sampled_from(args)
    least, most = bounds.min_len, max(bounds.min_len, bounds.max_len or _MAX_ITEMS)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(value_strategy(args[0], [], vocab_size), min_size=least, max_size=most).map(tuple)
    if origin is tuple:
        return st.tuples(*(value_strategy(a, [], vocab_size) for a in args))
    if origin in (list, Sequence):
        return st.lists(value_strategy(args[0], [], vocab_size), min_size=least, max_size=most)
    if origin is dict:
        keys, values = (value_strategy(a, [], vocab_size) for a in args)
        return st.dictionaries(keys, values, min_size=least, max_size=most)
    if annotation is Any:  # a parameter that takes objects (a draft model): names and junk
        return st.one_of(st.sampled_from(["ngram", ""]), st.text(max_size=12), st.integers(-3, 3), st.none())
    return st.from_type(annotation)


def invalid_values(annotation: Any, metadata: Sequence[Any]) -> st.SearchStrategy[Any]:
    """Values a model should reject with a `ParameterError`: wrong types, NaN, ±inf, just out of bounds."""
    annotation, meta = _flatten(annotation, metadata)
    b = Bounds.of(meta)
    outside = [x for x in (b.lo, b.hi) if x is not None]
    outside = [math.nextafter(float(x), -math.inf if x == b.lo else math.inf) for x in outside]
    return st.sampled_from([math.nan, math.inf, -math.inf, "1", None, [], {}, 1.5, (1.5,), {"a": 1}, object, *outside])


@st.composite
def params_dicts(draw: st.DrawFn, model: type[BaseModel], vocab_size: int) -> dict[str, Any]:
    """Keyword parameters for `model`: optional ones often left out, one in twenty times one invalid value."""
    out: dict[str, Any] = {}
    fields = model.model_fields
    for name, f in fields.items():
        if not f.is_required() and draw(st.booleans()):
            continue
        out[name] = draw(value_strategy(f.annotation, f.metadata, vocab_size))
    if fields and draw(st.integers(0, 19)) == 7:  # not 0: hypothesis draws its simplest value often
        name = draw(st.sampled_from(sorted(fields)))
        out[name] = draw(invalid_values(fields[name].annotation, fields[name].metadata))
    return out

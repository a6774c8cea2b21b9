"""The spec target: chain strings and specs, valid, mutated and malformed, and values of the wrong type.

Whatever `Chain.parse` and `Chain.from_spec` are given, they return a chain that round-trips or
raise a decodekit error (a `ChainSpecError` for what cannot be parsed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from decodekit.chain import Chain
from decodekit.testing.fuzz.catalogue import SamplerInfo, registered_samplers
from decodekit.testing.fuzz.chains import check_round_trip, stage_draws
from decodekit.testing.fuzz.outcomes import Report

__all__ = ["SpecCase", "check_spec_case", "spec_cases"]

_ALPHABET = "()[]{},:=|'\"\\-+.*0123456789e_ kx#;\n\x00é"
_NASTY = (
    "top_k(", "top_k(1))", "top_k(1) |", "| top_k(1)", "||", "top_k(**{'k': 1})", "top_k(*[1])",
    "top_k(k=1, k=2)", "top_k(1, k=1)", "top_k(x)", "top_k.a(1)", "top_k()()", "1(2)", "top_k(1e999)",
    "top_k(-1e999)", "top_k('\\')", "top_k('open)", "top_k(\x00)", "top_k(lambda: 1)",
    "top_k(__import__('os'))", "sample | sample", "temperature(1) | sample | top_k(3)", "temperature(True)",
    "top_k(k=None)", "é()", "top_k(1)#c", "top_k(1);top_p(2)", "top_k(b'1')", "top_k(1j)", "top_k(...)",
    "top_k(set())", "logit_bias({[1]: 2})", "logit_bias({{1}: 2})", "logit_bias({1: 2, 1: 3})",
    "logit_bias({1.5: 2})", "logit_bias(bias={True: 1})", "allowed_tokens([])", "allowed_tokens(((),))",
    "bad_words([[1], []])", "sequence_bias([[[1], 1e400]])", "top_k(0x10)", "top_k(1_0)", "top_k(--1)",
    "top_k(+1)", "top_k(not 1)", "top_k(1 if 1 else 2)", "top_k(f'{1}')", "top_k([1][0])", "top_k({1})",
    "temperature(value=float('nan'))", "top_k(1, 2, 3, 4, 5)", "top_k(k=1, **{})", "(top_k)", "[top_k]",
    "top_k(1) | | sample", " ", "", "\t|\t", "top_k(1)\n| sample", "top_p(p=.5, min_keep=1e3)",
)  # fmt: skip
_DEPTHS = (10, 100, 1_000, 3_000, 100_000)
_DEEP = (
    lambda n: f"temperature({'-' * n}1)",
    lambda n: f"top_k({'[' * n}1{']' * n})",
    lambda n: f"top_k({'(' * n}1{')' * n})",
    lambda n: "top_k(" * n,
    lambda n: f"top_k({'9' * n})",
    lambda n: " | ".join(["top_k(1)"] * min(n, 3_000)),
    lambda n: "[" * n + "]" * n,
    lambda n: '[{"name": "top_k", "params": {"k": ' + "[" * n + "1" + "]" * n + "}}]",
)
_WRONG_TYPES: tuple[Any, ...] = (None, 5, 1.5, b"top_k(1)", ["top_k"], {"name": "top_k"}, object(), True)


@dataclass(frozen=True)
class SpecCase:
    form: str  # "string": given to Chain.parse; "spec": to Chain.from_spec
    value: Any


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6))
    return st.recursive(
        scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3)
    )


@st.composite
def _valid_text(draw: st.DrawFn, catalogue: Sequence[SamplerInfo]) -> str:
    stages = draw(st.lists(st.sampled_from(catalogue), min_size=1, max_size=3))
    return " | ".join(draw(stage_draws(s, 17)).code() for s in stages)


@st.composite
def _mutated(draw: st.DrawFn, text: str) -> str:
    """`text` with up to three single-character edits (insert, delete, replace)."""
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        op, ch = draw(st.sampled_from(("insert", "delete", "replace"))), draw(st.sampled_from(_ALPHABET))
        end = i if op == "insert" else i + 1  # insert keeps text[i]; delete and replace drop it
        text = text[:i] + ("" if op == "delete" else ch) + text[end:]
    return text


@st.composite
def _specs(draw: st.DrawFn, catalogue: Sequence[SamplerInfo]) -> Any:
    """Stage lists with names and params of any JSON type, odd item shapes, JSON text good and bad."""
    names = st.one_of(st.sampled_from([s.name for s in catalogue]), _json_values())
    item = st.one_of(
        st.fixed_dictionaries({"name": names}, optional={"params": _json_values()}),
        st.dictionaries(st.text(max_size=6), _json_values(), max_size=3),
        names,
        st.sampled_from(_WRONG_TYPES),
    )
    spec = draw(st.lists(item, max_size=3))
    form = draw(st.integers(0, 3))
    if form == 0:
        try:
            return draw(_mutated(json.dumps(spec)))
        except (TypeError, ValueError):
            return spec
    return tuple(spec) if form == 1 else spec


@st.composite
def spec_cases(draw: st.DrawFn, samplers: Sequence[SamplerInfo] | None = None) -> SpecCase:
    catalogue = tuple(samplers) if samplers is not None else registered_samplers()
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return SpecCase("string", draw(st.sampled_from(_NASTY)))
    if kind == 1:
        deep = draw(st.sampled_from(_DEEP))(draw(st.sampled_from(_DEPTHS)))
        return SpecCase(draw(st.sampled_from(("string", "spec"))), deep)
    if kind == 2:
        return SpecCase(draw(st.sampled_from(("string", "spec"))), draw(st.sampled_from(_WRONG_TYPES)))
    if kind == 3:
        return SpecCase("spec", draw(_specs(catalogue)))
    text = draw(_valid_text(catalogue))
    return SpecCase("string", draw(_mutated(text)) if kind == 4 else text)


def check_spec_case(case: SpecCase, report: Report) -> None:
    """Parse; a chain that comes back must round-trip. Exceptions propagate."""
    chain = Chain.parse(case.value) if case.form == "string" else Chain.from_spec(case.value)
    check_round_trip(chain, report)

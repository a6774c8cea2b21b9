"""The string form `"name(arg, key=value) | name"`: values as Python's literal syntax reads them,
and every malformed input a `ChainSpecError` with the position and what was expected there."""

from __future__ import annotations

import ast
import json
import math
import random
import re
import warnings
from typing import Any

import pytest

import decodekit as dk
from decodekit.chain_string import MAX_DEPTH, StageCall, parse_chain_string, parse_stage


def test_a_hand_worked_chain() -> None:
    assert parse_chain_string(" a(1, x=2) |b| c() ") == [
        StageCall("a", [1], {"x": 2}),
        StageCall("b", [], {}),
        StageCall("c", [], {}),
    ]
    [stage] = parse_chain_string("f(-1.5e3, +2, 'it\\'s', \"|\", [1, (2, 3)], {'k': (1,)}, None, True, (), (4), 1_000)")
    assert stage.args == [-1500.0, 2, "it's", "|", [1, (2, 3)], {"k": (1,)}, None, True, (), 4, 1000]
    assert parse_stage("window(size=128, sinks=4)", what="cache") == StageCall("window", [], {"size": 128, "sinks": 4})
    assert parse_chain_string("logit_bias({5: -inf, 6: inf})")[0].args == [{5: float("-inf"), 6: float("inf")}]


def _literal(rng: random.Random, depth: int = 0) -> Any:
    """A random Python literal: numbers, strings, constants, and containers of them."""
    kinds = ["int", "float", "str", "const"] + (["list", "tuple", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, 1, -7, 10**30, rng.randint(-(10**6), 10**6)])
    if kind == "float":
        return rng.choice([0.5, -2.25e-8, 1e300, rng.uniform(-10, 10)])
    if kind == "str":
        return rng.choice(["", "a|b", "q'uote", 'd"q', "back\\slash", "naïve", "x(y)"])
    if kind == "const":
        return rng.choice([None, True, False])
    items = [_literal(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    return {rng.choice([1, "k", (1, 2), -3.5, "z"]): v for v in items}


def test_values_equal_what_python_reads_from_the_same_text() -> None:
    """A second implementation: `ast.literal_eval` of each value's repr, on 500 random literals."""
    rng = random.Random(0)
    for _ in range(500):
        values = [_literal(rng) for _ in range(rng.randint(1, 3))]
        text = "stage(" + ", ".join(map(repr, values)) + ", key=" + repr(values[0]) + ")"
        [stage] = parse_chain_string(text)
        expected = [ast.literal_eval(repr(v)) for v in values]
        assert stage.args == expected and stage.kwargs == {"key": expected[0]}, text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at position 0: expected a chain stage name, found the end"),
        ("top_k(5", "at position 7: expected ',' or '\\)' to close the '\\(' at position 5, found the end"),
        ("top_k(5))", "at position 8: expected '\\|' or the end, found '\\)'"),
        ("f([1, 2", "at position 7: expected ',' or '\\]' to close the '\\[' at position 2, found the end"),
        ("f('abc)", 'at position 2: expected a closed string literal, found "\'"'),
        ("f('\\x1')", "at position 2: expected a string with valid escapes"),
        ("logit_bias({[1]: 2})", "at position 12: expected a hashable dict key .* not \\[1\\]"),
        ("f({1 2})", "at position 5: expected ':' after a dict key, found '2'"),
        ("f(1 2)", "at position 4: expected ',' or '\\)' to close the '\\(' at position 1, found '2'"),
        ("f(x=1, x=2)", "at position 7: expected each parameter once; x is given twice"),
        ("f(x=1, 2)", "at position 7: expected name=value"),
        ("f(-'a')", "at position 3: expected a number after the sign"),
        ("f(@)", "at position 2: expected a literal"),
        ("f(1 + 2)", "at position 4: expected ',' or '\\)'"),
        ("1abc", "at position 0: expected a chain stage name, found '1'"),
        ("a.b", "at position 1: expected '\\|' or the end, found '.'"),
        ("temperature(0.7) | top-p(0.9)", "at position 22: found '-' in the name 'top-p'; .* with '_' \\('top_p'\\)"),
        ("repetition-penalty-2", "at position 10: found '-' in the name 'repetition-penalty-2'"),
        ("f(" + "9" * 5000 + ")", "at position 2: expected a number of at most 4,300 digits"),
        ("f(" + "-" * 3000 + "1)", f"at position {2 + MAX_DEPTH}: expected a value nested at most {MAX_DEPTH} deep"),
        ("f(" + "[" * 3000 + "]" * 3000 + ")", f"expected a value nested at most {MAX_DEPTH} deep"),
    ],
)
def test_malformed_strings_name_the_position_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(dk.ChainSpecError, match=message):
        parse_chain_string(text)


def test_the_depth_limit_allows_realistic_nesting() -> None:
    nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    [stage] = parse_chain_string(f"f({nested})")
    depth, value = 0, stage.args[0]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == MAX_DEPTH - 2  # the innermost list is empty


def test_one_stage_forms_reject_a_chain_and_non_strings() -> None:
    with pytest.raises(dk.ChainSpecError, match="^strategy 'beam-search': at position 4: found '-' in the name"):
        parse_stage("beam-search", what="strategy")
    with pytest.raises(dk.ChainSpecError, match="at position 6: expected the end \\(one name\\(args\\), no '\\|'\\)"):
        parse_stage("dense | gqa", what="cache")
    with pytest.raises(dk.ChainSpecError, match="chain 5 is a int; allowed: a string"):
        dk.Chain.parse(5)  # type: ignore[arg-type]
    with pytest.raises(dk.ChainSpecError, match="chain \\['top_k'\\] is a list"):
        dk.Chain.parse(["top_k"])  # type: ignore[arg-type]
    with pytest.raises(dk.ChainSpecError, match="strategy None is a NoneType"):
        dk.decode(object(), [[1]], strategy=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([{"name": 5}], "stage 0 name is 5; allowed: a string"),
        ([{"name": ["top_k"]}], "stage 0 name is \\['top_k'\\]"),
        ([{"name": "top_k", "params": {1: 2}}], "stage 0 params is \\{1: 2\\}; allowed: an object with string keys"),
        ([{"name": "top_k", "params": [5]}], "stage 0 params is \\[5\\]"),
        ([7], "stage 0 is 7"),
        ({"name": "top_k"}, "allowed: a list of stage objects"),
        ("[1,", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ([{"name": {"a": 1}}], "stage 0 name is \\{'a': 1\\}; allowed: a string"),
    ],
)
def test_malformed_specs_are_chain_spec_errors(spec: Any, message: str) -> None:
    with pytest.raises(dk.ChainSpecError, match=message):
        dk.Chain.from_spec(spec)


def test_bare_words_are_strings_so_a_command_line_needs_no_inner_quotes() -> None:
    [call] = parse_chain_string("speculative(draft=tiny-shakespeare-draft, k=4)")
    assert call.kwargs == {"draft": "tiny-shakespeare-draft", "k": 4}
    [call] = parse_chain_string("window(size=auto, sinks=4, store=int8)")
    assert call.kwargs == {"size": "auto", "sinks": 4, "store": "int8"}
    assert parse_chain_string("f(-inf, True, None, x)")[0].args == [float("-inf"), True, None, "x"]


def test_json_pasted_into_a_chain_string_reads_as_json() -> None:
    """`json_schema(schema={... "additionalProperties": false})` read `false` as the string 'false' (a bare word)."""
    schema = {"type": "object", "properties": {"a": {"type": ["integer", "null"]}}, "additionalProperties": False}
    [call] = parse_chain_string(f"json_schema(schema={json.dumps(schema)})")
    assert call.kwargs == {"schema": schema}
    assert parse_chain_string("f(true, false, null, [null], {'k': true})")[0].args == [
        True,
        False,
        None,
        [None],
        {"k": True},
    ]


def test_nan_is_read_as_python_spells_it_as_inf_is() -> None:
    [call] = parse_chain_string("f(nan, -nan, x=nan)")
    assert all(math.isnan(v) for v in [*call.args, call.kwargs["x"]])


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_value_gets_one_answer_from_a_chain_string_a_spec_and_create(value: str) -> None:
    """`top_p(nan)` said "not a bool or a string": the bare word was read as the string 'nan'."""
    expected = rf"top_p: p={value} is invalid: Input should be a finite number; allowed: a number 0 < p <= 1"
    spec = json.loads(json.dumps([{"name": "top_p", "params": {"p": float(value)}}]))  # JSON's NaN, Infinity
    for build in (
        lambda: dk.Chain.parse(f"top_p({value})"),
        lambda: dk.Chain.parse(f"top_p(p={value})"),
        lambda: dk.Chain.from_spec(spec),
        lambda: dk.create(f"top_p({value})"),
        lambda: dk.create("top_p", float(value)),
    ):
        with pytest.raises(dk.ParameterError, match=f"^{re.escape(expected)}$"):
            build()


@pytest.mark.parametrize(
    ("text", "draft"),
    [
        ("speculative(draft=m(n_layer=1), k=3)", "m(n_layer=1)"),
        (
            "speculative(draft=hf(dtype=float32, device=cpu):/models/tiny-gpt2, k=3)",
            "hf(dtype=float32, device=cpu):/models/tiny-gpt2",
        ),
        (
            "speculative(draft=tiny-shakespeare-draft(a=[1, (2)], b='x)'), k=3)",
            "tiny-shakespeare-draft(a=[1, (2)], b='x)')",
        ),
    ],
)
def test_a_call_as_a_bare_value_is_its_text_as_if_quoted(text: str, draft: str) -> None:
    """A model with parameters inside a strategy needs no quotes: its balanced brackets are one value."""
    quoted = text.replace(f"draft={draft}", f"draft={draft!r}")
    assert parse_stage(text, what="strategy") == parse_stage(quoted, what="strategy")
    assert parse_stage(text, what="strategy") == StageCall("speculative", [], {"draft": draft, "k": 3})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "speculative(draft=m(n_layer=1, k=3)",
            "at position 35: expected ',' or '\\)' to close the '\\(' at position 11",
        ),
        (
            "speculative(draft=m(n_layer=1 2))",
            "at position 30: expected ',' or '\\)' to close the '\\(' at position 19",
        ),
        ("f(a=" + "m(a=" * 3000 + ")" * 3001, f"expected a value nested at most {MAX_DEPTH} deep"),
    ],
    ids=["unclosed", "no-comma", "deep"],
)
def test_a_malformed_call_as_a_value_names_the_position(text: str, message: str) -> None:
    with pytest.raises(dk.ChainSpecError, match=message):
        parse_stage(text, what="strategy")


def test_strings_read_their_escapes_as_python_without_touching_the_warning_filters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unknown escape ("\\d") was read by `ast.literal_eval` inside `warnings.catch_warnings()`, which swaps the
    process's warning filters: a service parsing chains on 8 threads at once was left ignoring every warning (3 runs
    of 3, 3,000 parses a thread). Now no warning is raised to silence, and the values are still Python's."""
    texts = [r"'\d+'", r"'a\\d'", r"'\\\d'", r"'\n\t\x41\u00e9\101\N{BULLET}\'\"'", r'"\q\\"', r"'\8\9'"]
    swapped: list[object] = []
    real = warnings.catch_warnings

    def counted(*args: Any, **kwargs: Any) -> warnings.catch_warnings:
        swapped.append(args)
        return real(*args, **kwargs)

    with warnings.catch_warnings(record=True) as raised, monkeypatch.context() as patched:
        warnings.simplefilter("always")
        patched.setattr(warnings, "catch_warnings", counted)
        read = [parse_stage(f"f({text})", what="chain").args[0] for text in texts]
    assert swapped == []  # parsing swapped none of the process's warning filters
    assert read == ["\\d+", "a\\d", "\\\\d", "\n\tA\u00e9A\u2022'\"", "\\q\\", "\\8\\9"]  # as Python reads them
    assert raised == []

"""1,000 sampled generations from tiny-shakespeare under each kind of grammar, in one batch each: every
one is complete, ended by its grammar, and checked by a second implementation (the jsonschema package,
Python's `re`, a recursive parser of the Lark grammar's language).

Each grammar admits only texts shorter than `max_new_tokens`, so a row that ran out of tokens would be a
failure of the stage, not of the model. (A character model given an unbounded string or number can spin
on it; docs/grammar.md says how to bound them.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

import decodekit as dk

ROWS = 1000
PROMPT = "ROMEO:\n"

# Nested objects, an array, enums, an integer and a number with bounds, strings with patterns.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "who": {"type": "string", "pattern": "^[A-Z][a-z]{1,5}$"},
        "act": {"type": "integer", "minimum": 1, "maximum": 5},
        "mood": {"enum": ["merry", "sad", "wroth"]},
        "says": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string", "pattern": "^[a-z]{1,4}$"}},
        "at": {
            "type": "object",
            "properties": {"hour": {"type": "number", "minimum": 0, "maximum": 12, "multipleOf": 0.5}},
            "required": ["hour"],
            "additionalProperties": False,
        },
    },
    "required": ["who", "act", "mood", "says", "at"],
    "additionalProperties": False,
}
LONGEST_JSON = len('{"who":"Abcdef","act":1,"mood":"merry","says":["abcd","abcd"],"at":{"hour":10.5}}')  # 81

PATTERN = r"[A-Z][a-z]{2,7}: (thou|thee|my lord)( [a-z]{1,6}){1,3}[.!?]"
LONGEST_LINE = 8 + 2 + 7 + 3 * 7 + 1  # 39

# A list of words, numbers and lists of them: brackets that must match, two deep.
LARK = r"""
start: list
list: "[" item ("," item){0,3} "]"
item: WORD | NUMBER | inner
inner: "[" leaf ("," leaf){0,3} "]"
leaf: WORD | NUMBER
WORD: /[a-z]{1,5}/
NUMBER: /[0-9]{1,3}/
"""
LONGEST_LIST = 2 + 4 * (2 + 4 * 5 + 3) + 3  # 105


def parse_list(text: str) -> list[Any]:
    """The Lark grammar's language, parsed by hand: ValueError for anything else."""
    atom = re.compile(r"[a-z]{1,5}|[0-9]{1,3}")

    def items(at: int, depth: int) -> tuple[list[Any], int]:
        if text[at : at + 1] != "[":
            raise ValueError(f"expected '[' at {at}")
        out: list[Any] = []
        at += 1
        while True:
            if depth < 2 and text[at : at + 1] == "[":
                inner, at = items(at, depth + 1)
                out.append(inner)
            else:
                m = atom.match(text, at)
                if m is None:
                    raise ValueError(f"expected a word or number at {at}")
                out.append(m.group())
                at = m.end()
            if text[at : at + 1] == "]" and 1 <= len(out) <= 4:
                return out, at + 1
            if text[at : at + 1] != "," or len(out) == 4:
                raise ValueError(f"expected ',' or ']' at {at}")
            at += 1

    parsed, end = items(0, 1)
    if end != len(text):
        raise ValueError(f"trailing text at {end}")
    return parsed


def thousand(model: Any, stage: Any, max_new_tokens: int) -> Any:
    chain = dk.Chain([stage, dk.create("temperature", value=0.9)])
    out = dk.generate(model, [PROMPT] * ROWS, chain=chain, max_new_tokens=max_new_tokens, seed=0)
    assert out.finish_reasons == ["stop"] * ROWS and set(out.stopped_by) == {stage.name}
    assert out.text is not None and len(set(out.text)) > ROWS // 4  # sampled: many different texts
    return out


@pytest.mark.slow
def test_a_thousand_json_documents_parse_and_validate(shakespeare: Any) -> None:
    stage = dk.create("json_schema", schema=SCHEMA)
    out = thousand(shakespeare, stage, LONGEST_JSON + 8)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    invalid = [text for text in out.text if not validator.is_valid(json.loads(text))]
    assert invalid == []


@pytest.mark.slow
def test_a_thousand_lines_match_the_regex(shakespeare: Any) -> None:
    out = thousand(shakespeare, dk.create("regex", pattern=PATTERN), LONGEST_LINE + 6)
    assert [text for text in out.text if not re.fullmatch(PATTERN, text)] == []


@pytest.mark.slow
def test_a_thousand_lists_parse_under_the_lark_grammar(shakespeare: Any) -> None:
    out = thousand(shakespeare, dk.create("grammar", lark=LARK), LONGEST_LIST + 6)
    parsed = [parse_list(text) for text in out.text]
    assert any(isinstance(item, list) for p in parsed for item in p)  # the nesting is used


def test_the_checks_can_fail() -> None:
    """The second implementations reject what the grammars exclude."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    good = {"who": "Romeo", "act": 2, "mood": "sad", "says": ["ay"], "at": {"hour": 1.5}}
    assert validator.is_valid(good)
    for bad in ({**good, "mood": "glad"}, {**good, "at": {"hour": 1.25}}, {**good, "who": "romeo"}, {**good, "x": 1}):
        assert not validator.is_valid(bad)
    assert not re.fullmatch(PATTERN, "Romeo: thou art.x")
    assert parse_list("[ab,[1,2],c]") == ["ab", ["1", "2"], "c"]
    for bad_list in ("[ab,[1,[2]]]", "[ab,]", "[a,b,c,d,e]", "[ab]]"):
        with pytest.raises(ValueError):
            parse_list(bad_list)

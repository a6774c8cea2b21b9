"""JSON Schema features a user writes, one schema each, sampled at temperature 1.0 from tiny-shakespeare (84
characters, no end token) and from a random model over a byte-level BPE (46,896 tokens, an end token): every
row is complete, ended by its grammar, and valid by the jsonschema package (with its format checker). Each
schema admits only texts shorter than `max_new_tokens` (docs/grammar.md: bound strings and numbers), so a row
that ran out of tokens is a failure of the stage."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

import decodekit as dk

DIGIT = {"type": "integer", "minimum": 0, "maximum": 9}
FLAG = {"type": "boolean"}

SCHEMAS: dict[str, Any] = {
    "nested objects": {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": DIGIT}, "required": ["b"], "additionalProperties": False}
        },
        "required": ["a"],
        "additionalProperties": False,
    },
    "$ref and $defs": {
        "$defs": {"n": {"type": "integer", "minimum": -5, "maximum": 5}},
        "type": "array",
        "items": {"$ref": "#/$defs/n"},
        "maxItems": 3,
    },
    "recursive $ref": {
        "$defs": {
            "t": {
                "type": "object",
                "properties": {"k": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/t"}}},
                "required": ["k"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/t",
    },
    "anyOf": {"anyOf": [DIGIT, {"type": "string", "maxLength": 3, "pattern": "^[a-z]*$"}]},
    "oneOf, disjoint": {"oneOf": [DIGIT, FLAG, {"type": "null"}]},
    "enum and const": {
        "type": "array",
        "prefixItems": [{"enum": ["a", 1, None, True]}, {"const": {"x": [1, "y"]}}],
        "items": False,
        "minItems": 2,
    },
    "type list": {"type": ["string", "null"], "maxLength": 3},
    "pattern": {"type": "string", "pattern": "^[A-Z][a-z]{1,4}!?$"},
    "pattern, unanchored": {"type": "string", "pattern": "ab", "maxLength": 6},
    "minLength and maxLength": {"type": "string", "minLength": 2, "maxLength": 4},
    "format date": {"type": "string", "format": "date"},
    "format uuid": {"type": "string", "format": "uuid"},
    "format email": {"type": "string", "format": "email", "maxLength": 12},
    "integer range": {"type": "integer", "minimum": -20, "maximum": 300},
    "exclusive bounds": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
    "multipleOf, integer": {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 100},
    "multipleOf, number": {"type": "number", "multipleOf": 0.25, "minimum": -1, "maximum": 2},
    "array, minItems and maxItems": {"type": "array", "items": DIGIT, "minItems": 2, "maxItems": 4},
    "additionalProperties false, required subset": {
        "type": "object",
        "properties": {"a": FLAG, "b": FLAG, "c": FLAG},
        "required": ["b"],
        "additionalProperties": False,
    },
    "patternProperties": {  # an additionalProperties schema's keys are unbounded strings: a pattern bounds them
        "type": "object",
        "properties": {"a": DIGIT},
        "required": ["a"],
        "patternProperties": {"^x[a-z]$": {"type": "string", "maxLength": 2}},
        "additionalProperties": False,
        "maxProperties": 2,
    },
    "nested true and false": {  # `a` any value valid under both (true, a boolean); `b` never written
        "type": "object",
        "properties": {"a": {"allOf": [True, FLAG]}, "b": False},
        "required": ["a"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("model", ["shakespeare", "bpe_model"])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_sampled_documents_validate(request: pytest.FixtureRequest, model: str, name: str) -> None:
    schema = SCHEMAS[name]
    chain = dk.Chain([dk.create("json_schema", schema=schema), dk.create("temperature", value=1.0)])
    out = dk.generate(
        request.getfixturevalue(model), ["ROMEO:\n"] * 8, chain=chain, max_new_tokens=120, seed=list(range(8))
    )
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert out.text is not None
    for text, reason in zip(out.text, out.finish_reasons):
        assert reason == "stop", (name, text)
        validator.validate(json.loads(text))

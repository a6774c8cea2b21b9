"""Registers the grammar stages; imports no torch and no engine (the implementations load on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_grammar.params import GrammarParams, JsonParams, JsonSchemaParams, RegexParams

_STAGES = "decodekit_grammar.stages"


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "json_schema",
        f"{_STAGES}:JsonSchema",
        JsonSchemaParams,
        "Keep only tokens that continue a JSON value valid under a JSON Schema; end the row when it is complete",
    )
    register(
        "json",
        f"{_STAGES}:Json",
        JsonParams,
        "Keep only tokens that continue a JSON value; end the row when it is complete",
    )
    register(
        "regex",
        f"{_STAGES}:Regex",
        RegexParams,
        "Keep only tokens that continue a match of a regular expression; end the row when no more can follow",
    )
    register(
        "grammar",
        f"{_STAGES}:Lark",
        GrammarParams,
        "Keep only tokens that continue a sentence of a Lark or GBNF grammar; end the row when it is complete",
    )

"""The grammar stages' parameters (pydantic only: cheap to import). A grammar is checked when its stage is
built (`stages`), by the engine, not here: these models only say what shape a grammar is given in.

Each grammar parameter takes one grammar for every row, or a list of one per prompt (None: that
prompt's rows unconstrained), so rows with different grammars decode in one batch.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import Field, StrictBool, model_validator

from decodekit import Params

__all__ = ["GrammarParams", "JsonParams", "JsonSchemaParams", "RegexParams", "Whitespace"]

Whitespace = Literal["compact", "flexible"]

_WHITESPACE = "between JSON tokens: 'compact' (none), or 'flexible' (any; a weak model may spend its tokens on it)"


with warnings.catch_warnings():  # pydantic: a field named `schema` shadows BaseModel.schema (deprecated); intended
    warnings.filterwarnings("ignore", message='Field name "schema"')

    class JsonSchemaParams(Params):
        schema: dict[str, Any] | StrictBool | str | list[dict[str, Any] | StrictBool | str | None] = Field(  # type: ignore[assignment]
            description="a JSON Schema (an object or true, or its JSON text), or a list of one per prompt (None: "
            "unconstrained)"
        )
        whitespace: Whitespace = Field(default="compact", description=_WHITESPACE)


class JsonParams(Params):
    whitespace: Whitespace = Field(default="compact", description=_WHITESPACE)


class RegexParams(Params):
    pattern: str | list[str | None] = Field(
        description="a regular expression the whole text matches, or a list of one per prompt (None: unconstrained)"
    )


class GrammarParams(Params):
    lark: str | list[str | None] | None = Field(
        default=None, description="a Lark grammar (rule `start`), or a list of one per prompt (None: unconstrained)"
    )
    gbnf: str | list[str | None] | None = Field(
        default=None,
        description="a GBNF grammar (llama.cpp's; rule `root`), or a list of one per prompt (None: unconstrained)",
    )

    @model_validator(mode="after")
    def _one_grammar(self) -> GrammarParams:
        if (self.lark is None) == (self.gbnf is None):
            raise ValueError("allowed: one grammar, lark (a Lark grammar) or gbnf (llama.cpp's GBNF)")
        return self

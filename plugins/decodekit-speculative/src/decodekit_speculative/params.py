"""The strategy's parameters: bounds declared once, so the error message cannot drift from the check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from decodekit.params import Params

__all__ = ["NGRAM", "ModelObject", "SpeculativeParams"]

NGRAM = "ngram"
"""The `draft` value for prompt lookup: no draft model, the history's own earlier continuation."""


class _ModelObjectType:
    """The type of a parameter that takes a model object (`decodekit.Model`): anything callable with a
    `spec`, the two members that protocol requires. Checked without importing torch, so a parameter model
    that takes a model keeps listing plugins torch-free; listed as `Model`."""

    shown_as: ClassVar[str] = "Model"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(_model_object)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"description": "a model object (decodekit.Model), given in code"}


if TYPE_CHECKING:  # to a type checker a model object is a `decodekit.Model`, so `draft=my_model` type-checks
    from decodekit.model import Model as ModelObject
else:
    ModelObject = _ModelObjectType


def _model_object(value: object) -> object:
    if callable(value) and hasattr(value, "spec"):
        return value
    raise ValueError("not a model object (callable, with a spec)")


class SpeculativeParams(Params):
    draft: str | ModelObject = Field(
        default=NGRAM,
        description='a registered model name, a model object, or "ngram" (prompt lookup, the default)',
        json_schema_extra={"format": "model"},  # a model name: a batch job records it as it records its model
    )
    k: int = Field(default=4, ge=1, le=64, description="tokens the draft proposes per step (the most, with a schedule)")
    schedule: Literal["constant", "heuristic"] = Field(
        default="constant",
        description='"heuristic": each row from k, +2 after a round that accepted every draft, else -1, within 1..k',
    )
    ngram_size: int = Field(
        default=3, ge=1, le=64, description='"ngram": length of the suffix looked up in the history'
    )

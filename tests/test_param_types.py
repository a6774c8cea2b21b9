"""Parameter types as a reader writes them, built from the annotation and its declared bounds."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import pytest
from decodekit_adaptive.params import DynamicTemperatureParams, MirostatParams, MirostatV2Params
from decodekit_beam.params import BeamParams
from decodekit_cli.listing import bounds_text, samplers_report
from decodekit_constraints.params import BadWordsParams
from decodekit_grammar.params import JsonParams
from decodekit_guidance.params import GuidanceParams
from decodekit_penalties.params import DRYParams, FrequencyPenaltyParams, NoRepeatNGramParams, PresencePenaltyParams
from decodekit_repetition_penalty.params import RepetitionPenaltyParams
from decodekit_speculative.params import ModelObject, SpeculativeParams
from decodekit_top_p.params import TopPParams
from decodekit_truncation.params import (
    EpsilonParams,
    EtaParams,
    MinPParams,
    TopAParams,
    TopHParams,
    TypicalParams,
    XTCParams,
)
from pydantic import Field

import decodekit as dk
from decodekit.param_types import type_text
from decodekit.params import validate_params
from tinymodels import tiny_gpt

TokenId = Annotated[int, Field(ge=0)]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (float, "a number"),
        (int | None, "an integer or None"),
        (Annotated[int, Field(ge=0, lt=2**63)], "an integer in [0, 2**63)"),
        (tuple[TokenId, ...], "a list of integers ≥ 0"),
        (tuple[Annotated[tuple[TokenId, ...], Field(min_length=1)], ...], "a list of non-empty lists of integers ≥ 0"),
        (
            dict[TokenId, Annotated[float, Field(ge=-100, le=100)]],
            "a dict mapping integers ≥ 0 to numbers in [-100, 100]",
        ),
        (tuple[tuple[TokenId, ...], float], "a pair [a list of integers ≥ 0, a number]"),
        (Annotated[float, Field(gt=0, lt=1)], "a number in (0, 1)"),
        (bool | Literal["never"], "True, False or 'never'"),
        (str | ModelObject, "a string or a Model"),
    ],
)
def test_readable_types(annotation: object, expected: str) -> None:
    assert type_text(annotation) == expected


def test_a_parameters_own_bounds_name_it() -> None:
    class P(dk.Params):
        p: float = Field(gt=0, le=1, allow_inf_nan=False)
        tokens: tuple[TokenId, ...] = Field(min_length=1)
        k: int = Field(default=1, ge=1)
        word: str = Field(default="a", pattern=r"^[a-z]+\d?$", min_length=1)
        compiled: str = Field(default="x", pattern=re.compile("x+"))

    fields = P.model_fields
    assert bounds_text(fields["word"].metadata, "word") == r"non-empty, matches '^[a-z]+\d?$'"  # before: only non-empty
    assert bounds_text(fields["compiled"].metadata, "compiled") == "matches 'x+'"
    assert bounds_text(fields["p"].metadata, "p") == "0 < p ≤ 1, finite"
    assert bounds_text(fields["tokens"].metadata, "tokens") == "non-empty"
    assert bounds_text(fields["k"].metadata, "k") == "1 ≤ k"


def test_error_messages_read_the_same_types() -> None:
    with pytest.raises(dk.ParameterError, match=r"allowed: a list of integers in \[0, 2\*\*63\), non-empty$"):
        dk.create("allowed_tokens", tokens=[])


def test_allowed_carries_the_length_bounds_samplers_shows() -> None:
    """`tokens=[]` was refused with "Tuple should have at least 1 item after validation, not 0; allowed:
    list[int in [0, 2**63)]": a type the user never wrote, and no "non-empty", which `decodekit samplers` shows.
    A str with min_length=1 said "allowed: str"."""
    with pytest.raises(dk.ParameterError) as info:
        dk.create("allowed_tokens", tokens=[])
    assert str(info.value) == (
        "allowed_tokens: tokens=[] is invalid: Input should have at least 1 item, not 0; allowed: "
        "a list of integers in [0, 2**63), non-empty"
    )

    class P(dk.Params):
        name: str = Field(default="ab", min_length=2, max_length=4)
        pairs: tuple[int, ...] = Field(default=(1,), max_length=1)

    cases: list[tuple[dict[str, object], str]] = [
        (
            {"name": "a"},
            "p: name='a' is invalid: String should have at least 2 characters; allowed: a string, at least "
            "2 characters, at most 4 characters",
        ),
        (
            {"pairs": [1, 2]},
            "p: pairs=[1, 2] is invalid: Input should have at most 1 item, not 2; allowed: a list of integers, "
            "at most 1 item",
        ),
        ({"pairs": 3}, "p: pairs=3 is invalid: Input should be a list; allowed: a list of integers, at most 1 item"),
    ]
    for values, expected in cases:
        with pytest.raises(dk.ParameterError) as info:
            validate_params("p", P, values)
        assert str(info.value) == expected
    with pytest.raises(dk.ParameterError) as info:  # "finite" where an interval leaves it open: said "0 <= multiplier"
        dk.create("dry", multiplier=float("inf"))
    assert str(info.value).endswith("; allowed: a number 0 <= multiplier, finite")
    report = samplers_report(["allowed_tokens"])["samplers"][0]["params"][0]
    assert (report["bounds"], report["allowed"]) == ("non-empty", "a list of integers in [0, 2**63), non-empty")


def test_a_model_parameter_takes_a_model_object_and_refuses_the_rest() -> None:
    class P(dk.Params):
        model: str | ModelObject = "tiny"

    class Model:
        spec = "a spec"

        def __call__(self) -> None: ...

    model = Model()  # a stand-in: the check reads only that it is callable and has a spec, not what they are
    assert P(model=model).model is model and P().model == "tiny"  # type: ignore[arg-type,comparison-overlap]
    gpt = tiny_gpt()
    assert SpeculativeParams(draft=gpt).draft is gpt  # a real model type-checks as one (mypy refused it before)
    for bad in (None, 3, [model], print):  # not a model: not callable, or no spec
        with pytest.raises(
            dk.ParameterError, match=re.escape(f"model={bad!r} is invalid; allowed: a string or a Model")
        ):
            dk.params.validate_params("p", P, {"model": bad})
    assert "Model" in str(P.model_json_schema()["properties"]["model"])  # the listing's JSON Schema


def test_a_shipped_params_model_is_built_from_its_required_fields_alone() -> None:
    """Each default is spelled `Field(default=...)`: mypy reads only the keyword as a default, so with
    `Field(1, ...)` a user's `TopPParams(p=0.5)` was a mypy error (missing "min_keep"). `make lint`
    type-checks these calls; they failed it before."""
    built: list[dk.Params] = [
        DynamicTemperatureParams(temp=1.0, delta=0.5),
        MirostatParams(),
        MirostatV2Params(),
        BeamParams(),
        BadWordsParams(sequences=((1,),)),
        JsonParams(),
        GuidanceParams(),
        FrequencyPenaltyParams(penalty=0.5),
        PresencePenaltyParams(penalty=0.5),
        NoRepeatNGramParams(ngram_size=2),
        DRYParams(multiplier=0.8),
        RepetitionPenaltyParams(penalty=1.2),
        SpeculativeParams(),
        TopPParams(p=0.5),
        MinPParams(p=0.1),
        TypicalParams(),
        EpsilonParams(epsilon=0.01),
        EtaParams(epsilon=0.01),
        TopAParams(a=0.2),
        TopHParams(h=0.5),
        XTCParams(probability=0.5),
    ]
    for params in built:  # the constructor's defaults are those validating its given fields alone fills in
        given = {name: getattr(params, name) for name in params.model_fields_set}
        assert params == type(params).model_validate(given)

"""Registration, chain strings and specs, and parameter errors of the constraint samplers."""

from __future__ import annotations

import json
from typing import Any

import pytest

import decodekit as dk

CHAINS = {
    "logit_bias": ("logit_bias({50256: -100.0, 3: 2.5})", {"bias": {50256: -100.0, 3: 2.5}}),
    "sequence_bias": ("sequence_bias([[[10, 45], -2.0], [[64], -7.5]])", {"biases": (((10, 45), -2.0), ((64,), -7.5))}),
    "bad_words": ("bad_words([[5], [6, 7]])", {"sequences": ((5,), (6, 7))}),
    "allowed_tokens": ("allowed_tokens([1, 2, 3])", {"tokens": (1, 2, 3)}),
    "min_new_tokens": ("min_new_tokens(8, [50256])", {"n": 8, "stop_tokens": (50256,)}),
}


def test_registered_by_this_distribution() -> None:
    registry = dk.get_registry()
    for name in CHAINS:
        entry = registry.samplers[name]
        assert entry.distribution == "decodekit-constraints"
        assert entry.kind == "processor" and entry.description


@pytest.mark.parametrize("name", CHAINS)
def test_chain_string_fills_parameters_in_order_and_round_trips(name: str) -> None:
    text, params = CHAINS[name]
    chain = dk.Chain.parse(f"{text} | sample")
    assert chain.processors[0].params.model_dump() == params  # type: ignore[attr-defined]
    assert dk.Chain.from_spec(chain.to_spec()) == chain
    assert dk.Chain.from_spec(json_round_trip(chain.to_spec())) == chain  # JSON object keys are strings
    assert dk.Chain.parse(str(chain)) == chain


def json_round_trip(spec: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = json.loads(json.dumps(spec))
    return result


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("logit_bias", {"bias": {1: 200.0}}, ["bias.1=200.0", "less than or equal to 100"]),
        ("logit_bias", {"bias": {-1: 1.0}}, ["bias.-1", "greater than or equal to 0"]),
        ("sequence_bias", {"biases": []}, ["biases=[]", "at least 1"]),
        ("sequence_bias", {"biases": [[[1], float("inf")]]}, ["biases.0.1=inf", "finite"]),
        ("bad_words", {"sequences": [[]]}, ["sequences.0=[]", "at least 1"]),
        ("allowed_tokens", {"tokens": [-3]}, ["tokens.0=-3", "greater than or equal to 0"]),
        ("min_new_tokens", {"n": -1, "stop_tokens": [2]}, ["n=-1", "0 <= n"]),
        ("min_new_tokens", {"n": 3}, ["missing required parameter stop_tokens"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(
    name: str, params: dict[str, object], expected: list[str]
) -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.create(name, **params)
    for text in expected:
        assert text in str(info.value), str(info.value)

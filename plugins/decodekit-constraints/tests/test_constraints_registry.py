"""Registration, chain strings and specs, and parameter errors of the constraint samplers."""

from __future__ import annotations

from typing import Any

import pytest

from decodekit.testing.registry import check_bad_parameters, check_chain_string, check_registered

CHAINS: dict[str, tuple[str, dict[str, Any]]] = {
    "logit_bias": ("logit_bias({50256: -100.0, 3: 2.5})", {"bias": {50256: -100.0, 3: 2.5}}),
    "sequence_bias": ("sequence_bias([[[10, 45], -2.0], [[64], -7.5]])", {"biases": (((10, 45), -2.0), ((64,), -7.5))}),
    "bad_words": ("bad_words([[5], [6, 7]], false)", {"sequences": ((5,), (6, 7)), "include_prompt": False}),
    "allowed_tokens": ("allowed_tokens([1, 2, 3])", {"tokens": (1, 2, 3)}),
    "min_new_tokens": ("min_new_tokens(8, [50256])", {"n": 8, "stop_tokens": (50256,)}),
    "exponential_decay": ("exponential_decay(15, 1.6, [50256])", {"start": 15, "factor": 1.6, "stop_tokens": (50256,)}),
    "reasoning_budget": (
        "reasoning_budget(100, [151667], [151668], [198, 151668], true)",
        {"budget": 100, "start": (151667,), "end": (151668,), "forced": (198, 151668), "open": True},
    ),
}


def test_registered_by_this_distribution() -> None:
    for name in CHAINS:
        check_registered(name, distribution="decodekit-constraints", kind="processor")


@pytest.mark.parametrize("name", CHAINS)
def test_chain_string_fills_parameters_in_order_and_round_trips(name: str) -> None:
    check_chain_string(*CHAINS[name])


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("logit_bias", {"bias": {1: 200.0}}, ["bias.1=200.0", "less than or equal to 100"]),
        ("logit_bias", {"bias": {-1: 1.0}}, ["bias key=-1", "greater than or equal to 0"]),
        ("sequence_bias", {"biases": []}, ["biases=[]", "at least 1"]),
        ("sequence_bias", {"biases": [[[1], float("inf")]]}, ["biases.0.1=inf", "finite"]),
        ("bad_words", {"sequences": [[]]}, ["sequences.0=[]", "at least 1"]),
        ("allowed_tokens", {"tokens": [-3]}, ["tokens.0=-3", "greater than or equal to 0"]),
        ("min_new_tokens", {"n": -1, "stop_tokens": [2]}, ["n=-1", "0 <= n"]),
        ("min_new_tokens", {"n": 3}, ["missing required parameter stop_tokens"]),
        ("exponential_decay", {"start": 2, "factor": 0.0, "stop_tokens": [1]}, ["factor=0.0", "greater than 0"]),
        ("exponential_decay", {"start": -1, "factor": 1.5, "stop_tokens": [1]}, ["start=-1", "0 <= start"]),
        # Nested numbers take numbers only, as parameters do: pydantic alone reads True as 1, "3" as 3.
        ("allowed_tokens", {"tokens": [True]}, ["tokens.0=True", "not a bool"]),
        ("bad_words", {"sequences": [["3"]]}, ["sequences.0.0='3'", "not a bool or a string"]),
        ("min_new_tokens", {"n": 1, "stop_tokens": [False]}, ["stop_tokens.0=False", "not a bool"]),
        ("sequence_bias", {"biases": [[[1], True]]}, ["biases.0.1=True", "not a bool"]),
        ("logit_bias", {"bias": {True: 1.0}}, ["bias key=True", "not a bool"]),  # JSON's "3" is a key, True is not
        ("logit_bias", {"bias": {3: "2"}}, ["bias.3='2'", "not a bool or a string"]),
        ("reasoning_budget", {"budget": -1, "start": [1], "end": [2]}, ["budget=-1", "0 <= budget"]),
        ("reasoning_budget", {"budget": 5, "start": [], "end": [2]}, ["start=[]", "at least 1"]),
        ("reasoning_budget", {"budget": 5, "start": [1], "end": [2], "forced": []}, ["forced=[]", "at least 1"]),
        ("reasoning_budget", {"budget": 5, "start": [1]}, ["missing required parameter end"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(
    name: str, params: dict[str, object], expected: list[str]
) -> None:
    check_bad_parameters(name, params, expected)

"""Registration, chain strings and specs, and parameter errors of the penalty samplers."""

from __future__ import annotations

from typing import Any

import pytest

from decodekit.testing.registry import check_bad_parameters, check_chain_string, check_registered

CHAINS: dict[str, tuple[str, dict[str, Any]]] = {
    "frequency_penalty": ("frequency_penalty(0.5)", {"penalty": 0.5, "last_n": None, "include_prompt": False}),
    "presence_penalty": ("presence_penalty(0.5, 64, true)", {"penalty": 0.5, "last_n": 64, "include_prompt": True}),
    "no_repeat_ngram": ("no_repeat_ngram(3)", {"ngram_size": 3, "last_n": None}),
    "dry": (
        "dry(0.8, 1.75, 2, 256, [[10], [11, 12]])",
        {"multiplier": 0.8, "base": 1.75, "allowed_length": 2, "last_n": 256, "sequence_breakers": ((10,), (11, 12))},
    ),
}


def test_registered_by_this_distribution() -> None:
    for name in CHAINS:
        check_registered(name, distribution="decodekit-penalties", kind="processor")


@pytest.mark.parametrize("name", CHAINS)
def test_chain_string_fills_parameters_in_order_and_round_trips(name: str) -> None:
    check_chain_string(*CHAINS[name])


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("frequency_penalty", {"penalty": 2.5}, ["penalty=2.5", "-2 <= penalty <= 2"]),
        ("presence_penalty", {"penalty": -3.0}, ["penalty=-3.0", "-2 <= penalty <= 2"]),
        ("presence_penalty", {"penalty": 1.0, "last_n": 0}, ["last_n=0", "1 <= last_n"]),
        ("no_repeat_ngram", {"ngram_size": 0}, ["ngram_size=0", "1 <= ngram_size"]),
        ("dry", {"multiplier": -1.0}, ["multiplier=-1.0", "0 <= multiplier"]),
        ("dry", {"multiplier": 0.8, "base": 0.9}, ["base=0.9", "1 <= base"]),
        ("dry", {"multiplier": 0.8, "allowed_length": 0}, ["allowed_length=0", "1 <= allowed_length"]),
        (
            "dry",
            {"multiplier": 0.8, "sequence_breakers": [[-1]]},
            ["sequence_breakers.0.0=-1", "greater than or equal to 0"],
        ),
        # A token id takes numbers only, as a parameter does: pydantic alone reads True as token 1.
        ("dry", {"multiplier": 0.8, "sequence_breakers": [[True]]}, ["sequence_breakers.0.0=True", "not a bool"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(
    name: str, params: dict[str, object], expected: list[str]
) -> None:
    check_bad_parameters(name, params, expected)

"""Registration, chain strings and specs, and parameter errors of the adaptive samplers."""

from __future__ import annotations

import pytest

import decodekit as dk
from decodekit.testing.registry import check_bad_parameters, check_chain_string, check_registered

CHAINS = {
    "dynamic_temperature": ("dynamic_temperature(1.0, 0.5)", {"temp": 1.0, "delta": 0.5, "exponent": 1.0}),
    "mirostat": ("mirostat(5.0, 0.1, 50)", {"tau": 5.0, "eta": 0.1, "m": 50}),
    "mirostat_v2": ("mirostat_v2(5.0, 0.1)", {"tau": 5.0, "eta": 0.1}),
    "gumbel": ("gumbel", {}),
    "adaptive_p": ("adaptive_p(0.3, 0.5)", {"target": 0.3, "decay": 0.5}),
}
KINDS = {
    "dynamic_temperature": "processor",
    "mirostat": "selector",
    "mirostat_v2": "selector",
    "gumbel": "selector",
    "adaptive_p": "selector",
}


def test_registered_by_this_distribution() -> None:
    for name, kind in KINDS.items():
        check_registered(name, distribution="decodekit-adaptive", kind=kind)


def test_every_sampler_of_this_distribution_is_checked_here() -> None:
    """A sampler added to the distribution joins the parametrized checks of this file (and is named here)."""
    from decodekit import get_registry

    registered = {name for name, entry in get_registry().samplers.items() if entry.distribution == "decodekit-adaptive"}
    assert registered == set(CHAINS)


@pytest.mark.parametrize("name", CHAINS)
def test_chain_string_fills_parameters_in_order_and_round_trips(name: str) -> None:
    check_chain_string(*CHAINS[name])


def test_selectors_end_a_chain() -> None:
    chain = dk.Chain.parse("dynamic_temperature(1.0, 0.5) | mirostat_v2")
    assert chain.selector.name == "mirostat_v2"  # type: ignore[attr-defined]
    with pytest.raises(dk.ChainSpecError, match="selector"):
        dk.Chain.parse("gumbel | dynamic_temperature(1.0, 0.5)")


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("dynamic_temperature", {"temp": -1.0, "delta": 0.5}, ["temp=-1.0", "0 <= temp"]),
        ("dynamic_temperature", {"temp": 1.0, "delta": -0.5}, ["delta=-0.5", "0 <= delta"]),
        ("dynamic_temperature", {"temp": 1.0, "delta": 0.5, "exponent": -1.0}, ["exponent=-1.0", "0 <= exponent"]),
        ("mirostat", {"tau": -1.0}, ["mirostat", "tau=-1.0", "0 <= tau <= 10000"]),
        ("mirostat", {"eta": 1.5}, ["eta=1.5", "0 <= eta <= 1"]),
        ("mirostat", {"m": 1}, ["m=1", "2 <= m"]),
        ("mirostat_v2", {"tau": -1.0}, ["tau=-1.0", "0 <= tau"]),
        ("mirostat_v2", {"eta": 1.5}, ["eta=1.5", "0 <= eta <= 1"]),
        ("gumbel", {"temperature": 1.0}, ["unknown parameter temperature=1.0", "none"]),
        ("adaptive_p", {}, ["adaptive_p", "target", "required"]),
        ("adaptive_p", {"target": 1.5}, ["target=1.5", "target <= 1"]),
        ("adaptive_p", {"target": float("nan")}, ["target=nan"]),
        ("adaptive_p", {"target": 0.5, "decay": 1.0}, ["decay=1.0", "0 <= decay <= 0.99"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(
    name: str, params: dict[str, object], expected: list[str]
) -> None:
    check_bad_parameters(name, params, expected)

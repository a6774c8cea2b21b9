"""Registration, chain strings and specs, and parameter errors of the truncation samplers."""

from __future__ import annotations

from typing import Any

import pytest

from decodekit.testing.registry import check_bad_parameters, check_chain_string, check_registered

CHAINS: dict[str, tuple[str, dict[str, Any]]] = {
    "min_p": ("min_p(0.05)", {"p": 0.05, "min_keep": 1}),
    "typical": ("typical(0.95, 2)", {"mass": 0.95, "min_keep": 2}),
    "epsilon": ("epsilon(0.0003)", {"epsilon": 0.0003, "min_keep": 1}),
    "eta": ("eta(0.002)", {"epsilon": 0.002, "min_keep": 1}),
    "top_n_sigma": ("top_n_sigma(1.0)", {"n": 1.0}),
    "top_a": ("top_a(0.2)", {"a": 0.2, "min_keep": 1}),
    "top_h": ("top_h(0.4, 50)", {"h": 0.4, "top_n": 50}),
    "xtc": (
        "xtc(0.5, 0.1, 1, [198, 2])",
        {"probability": 0.5, "threshold": 0.1, "min_keep": 1, "special_tokens": (198, 2)},
    ),
}


def test_registered_by_this_distribution() -> None:
    for name in CHAINS:
        check_registered(name, distribution="decodekit-truncation", kind="processor")


def test_every_sampler_of_this_distribution_is_checked_here() -> None:
    """A sampler added to the distribution joins the parametrized checks of this file (and is named here)."""
    from decodekit import get_registry

    registered = {
        name for name, entry in get_registry().samplers.items() if entry.distribution == "decodekit-truncation"
    }
    assert registered == set(CHAINS)


@pytest.mark.parametrize("name", CHAINS)
def test_chain_string_fills_parameters_in_order_and_round_trips(name: str) -> None:
    check_chain_string(*CHAINS[name])


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("min_p", {"p": 1.5}, ["min_p", "p=1.5", "0 <= p <= 1"]),
        ("min_p", {"p": 0.1, "min_keep": 0}, ["min_keep=0", "1 <= min_keep"]),
        ("typical", {"mass": 0.0}, ["mass=0.0", "0 < mass <= 1"]),
        ("epsilon", {"epsilon": 1.0}, ["epsilon=1.0", "0 < epsilon < 1"]),
        ("eta", {"epsilon": -0.1}, ["epsilon=-0.1", "0 < epsilon < 1"]),
        ("top_n_sigma", {"n": -1.0}, ["n=-1.0", "0 <= n"]),
        ("top_a", {"a": 2.0}, ["a=2.0", "0 <= a <= 1"]),
        ("top_h", {"h": 0.0}, ["top_h", "h=0.0", "0 < h <= 1"]),
        ("top_h", {"h": 1.5}, ["h=1.5", "0 < h <= 1"]),
        ("top_h", {"h": 0.4, "top_n": 0}, ["top_n=0", "1 <= top_n"]),
        ("xtc", {"probability": 1.5}, ["probability=1.5", "0 <= probability <= 1"]),
        ("xtc", {"probability": 0.5, "threshold": -0.1}, ["threshold=-0.1", "0 <= threshold <= 1"]),
        ("min_p", {"p": 0.1, "k": 3}, ["unknown parameter k=3", "p, min_keep"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(
    name: str, params: dict[str, object], expected: list[str]
) -> None:
    check_bad_parameters(name, params, expected)

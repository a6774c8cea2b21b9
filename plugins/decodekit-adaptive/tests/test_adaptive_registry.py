"""Registration, chain strings and specs, and parameter errors of the adaptive samplers."""

from __future__ import annotations

import pytest

import decodekit as dk

CHAINS = {
    "dynamic_temperature": ("dynamic_temperature(1.0, 0.5)", {"temp": 1.0, "delta": 0.5, "exponent": 1.0}),
    "mirostat_v2": ("mirostat_v2(5.0, 0.1)", {"tau": 5.0, "eta": 0.1}),
    "gumbel": ("gumbel", {}),
}
KINDS = {"dynamic_temperature": "processor", "mirostat_v2": "selector", "gumbel": "selector"}


def test_registered_by_this_distribution() -> None:
    registry = dk.get_registry()
    for name, kind in KINDS.items():
        entry = registry.samplers[name]
        assert entry.distribution == "decodekit-adaptive"
        assert entry.kind == kind and entry.description


@pytest.mark.parametrize("name", CHAINS)
def test_chain_string_fills_parameters_in_order_and_round_trips(name: str) -> None:
    text, params = CHAINS[name]
    chain = dk.Chain.parse(text if KINDS[name] == "selector" else f"{text} | sample")
    stage = chain.selector if KINDS[name] == "selector" else chain.processors[0]
    assert stage.params.model_dump() == params  # type: ignore[attr-defined]
    assert dk.Chain.from_spec(chain.to_spec()) == chain
    assert dk.Chain.parse(str(chain)) == chain


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
        ("mirostat_v2", {"tau": -1.0}, ["tau=-1.0", "0 <= tau"]),
        ("mirostat_v2", {"eta": 1.5}, ["eta=1.5", "0 <= eta <= 1"]),
        ("gumbel", {"temperature": 1.0}, ["unknown parameter temperature=1.0", "none"]),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(
    name: str, params: dict[str, object], expected: list[str]
) -> None:
    with pytest.raises(dk.ParameterError) as info:
        dk.create(name, **params)
    for text in expected:
        assert text in str(info.value)

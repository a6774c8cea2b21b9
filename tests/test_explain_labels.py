"""`decodekit explain`'s data says what the rest of decodekit says: a stage as the chain string writes it, and a
stop token as `generate --json`'s `stopped_by` (its id), shown in the text with the token's text."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from decodekit_cli.explain import explain_steps
from decodekit_cli.explain_render import render_steps, steps_json
from hypothesis import HealthCheck, given, settings
from rich.console import Console

import decodekit as dk
from decodekit.chain import stage_label
from decodekit.plugins import get_registry
from decodekit.testing.fuzz.values import params_dicts

sys.path.insert(0, str(Path(__file__).parent))
import cli_testplugin


def test_json_stages_are_the_chain_strings_and_a_stop_token_is_its_id_with_its_text() -> None:
    """--json wrote "top_p(p=0.95)" beside a chain "top_p(p=0.95, min_keep=1) | sample"; `ended_by` was the
    string "95" where generate's `stopped_by` is 95, and the text said "stopped by 95"."""
    model, chain = cli_testplugin.load_model(), dk.Chain.parse("top_p(0.95) | sample")
    every = list(range(model.spec.vocab_size))  # the first token picked ends the row
    [step] = explain_steps(model, "ROMEO:", chain, steps=3, seed=0, stop_tokens=every)
    doc = json.loads(json.dumps(steps_json([step], chain=str(chain))))
    [stop] = dk.generate(model, "ROMEO:", chain=chain, max_new_tokens=3, seed=0, stop_tokens=every).stopped_by
    assert [s["stage"] for s in doc["steps"][0]["stages"]] == ["input", "top_p(p=0.95, min_keep=1)"]
    assert doc["chain"].startswith("top_p(p=0.95, min_keep=1) | ")
    assert doc["steps"][0]["ended_by"] == stop == step.token and isinstance(stop, int)
    console = Console(record=True, width=200)
    render_steps(console, [step], 3, ["input", "top_p(p=0.95)"])  # the tables keep the short form
    text = console.export_text()
    assert "│ top_p(p=0.95) " in text and "min_keep" not in text
    expected = f"ended after step 0: stopped by token {stop} ({cli_testplugin.ALPHABET[stop]!r})"
    assert text.rstrip().endswith(expected)


def test_a_single_survivors_entropy_is_zero_not_minus_zero() -> None:
    """One token left (a grammar's only continuation): -sum(p log p) is -0.0, which the table showed as "-0.000"."""
    import math

    import torch
    from decodekit_cli.explain import stage_stats

    survivors, entropy, _ = stage_stats(torch.tensor([float("-inf"), 2.5, float("-inf")]))
    assert (survivors, entropy, math.copysign(1.0, entropy)) == (1, 0.0, 1.0)
    assert f"{entropy:.3f}" == "0.000"


@pytest.mark.parametrize("name", sorted(get_registry().samplers))
def test_every_samplers_labels_parse_back_to_the_same_stage(name: str) -> None:
    """Each value `explain` prints (its tables' short labels, --json's full ones and chain) is a Python literal
    (`last_n=None`, `sequence_breakers=()`): it must read back through the chain parser as the same stage, for
    any parameters the sampler takes (drawn from its declared types and bounds, the required ones given)."""
    entry = get_registry().lookup("sampler", name)

    @settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(params_dicts(entry.params_model, 50))
    def round_trip(params: dict[str, Any]) -> None:
        try:
            stage = dk.create(name, **params)
        except dk.DecodekitError:  # one in twenty draws is invalid on purpose
            return
        alone = dk.Chain(selector=stage) if isinstance(stage, dk.SelectorBase) else dk.Chain([stage])
        for label in (stage_label(stage), stage_label(stage, every=False), str(alone)):
            assert dk.Chain.parse(json.loads(json.dumps(label))) == alone, label

    round_trip()

"""A model's optional `generation_defaults(prompt_length, keys)`: the command line asks it once, for the options it
is not given alone, and decodes with what it offers (said in one stderr line), as with an hf: checkpoint's config.

The commands run in this process (`cli_runner.run_cli`) on `cli-test-gpt`, the tiny model `tests/cli_testplugin.py`
registers, given the method here."""

from __future__ import annotations

import json
import os
from typing import Any

import cli_testplugin
import pytest
from cli_runner import run_cli
from decodekit_cli import sampling_options

MODEL = cli_testplugin.MODEL_NAME


def _offering(monkeypatch: pytest.MonkeyPatch, offer: dict[str, Any]) -> list[tuple[int | None, list[str]]]:
    """Load the test model with a `generation_defaults` that offers `offer`; the calls it gets are returned."""
    calls: list[tuple[int | None, list[str]]] = []
    from decodekit_cli.options import load_named_model as load  # what sampling_options imported

    def loaded(name: str) -> Any:
        model = load(name)

        def generation_defaults(prompt_length: int | None, keys: list[str]) -> dict[str, Any]:
            calls.append((prompt_length, list(keys)))
            return {key: value for key, value in offer.items() if key in keys}

        model.generation_defaults = generation_defaults
        return model

    monkeypatch.setattr(sampling_options, "load_named_model", loaded)
    return calls


def _generate(*extra: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    args = ["generate", "ROMEO", "-m", MODEL, "--seed", "0", "--json", *extra]
    return run_cli(args, env, fresh_plugins=True)


def test_the_model_is_asked_once_for_the_options_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _offering(monkeypatch, {"chain": "greedy", "max_new_tokens": 2, "strategy": "beam(num_beams=2)"})
    result = _generate("--strategy", "sample", "--stop", "zz")
    assert result.returncode == 0, result.stderr
    assert calls == [(len("ROMEO"), ["chain", "max_new_tokens", "num_return_sequences"])]  # a character per token
    assert result.stderr == (
        "decodekit: note: sampling with the model's own chain 'greedy', max_new_tokens 2; --chain, --max-new-tokens "
        "replace them\n"
    )
    report = json.loads(result.stdout)
    assert (report["chain"], report["max_new_tokens"], report["strategy"]) == ("greedy", 2, "sample")
    assert len(report["samples"][0]["tokens"]) <= 2


def test_a_model_given_every_option_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _offering(monkeypatch, {"chain": "greedy"})
    flags = ["--chain", "top_k(3) | sample", "--strategy", "sample", "--max-new-tokens", "2", "--stop", "zz", "-n", "1"]
    result = _generate(*flags)
    assert result.returncode == 0 and result.stderr == "" and calls == []
    assert json.loads(result.stdout)["chain"] == "top_k(k=3) | sample"

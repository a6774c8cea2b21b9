"""Errors a new user met following README and docs/cli.md: each names the option or field, the value and what is
allowed (before, each named something else, or said nothing a user could act on)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
from cli_runner import run_cli

FLAGS = ["-m", cli_testplugin.MODEL_NAME, "--max-new-tokens", "4", "--seed", "3"]


def _cli(*args: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), env, fresh_plugins=True)


@pytest.mark.parametrize("prompt", [[], ["ROMEO"]])
def test_ray_without_a_batch_job_names_ray_and_what_it_needs(prompt: list[str]) -> None:
    # it said "--output is missing; --input and --output go together", neither of which the user gave
    result = _cli("generate", *prompt, *FLAGS, "--ray")
    assert result.returncode == 2
    assert result.stderr == "decodekit: error: --ray: a batch job's option; allowed: with --input FILE --output FILE\n"


@pytest.mark.parametrize(
    ("field", "message"),
    [
        # "allowed: str", which the empty string is
        (
            {"prompt": ""},
            "prompt='' is invalid: String should have at least 1 character; allowed: a non-empty string (token ids: "
            "prompt_token_ids)",
        ),
        # "allowed: None, or int": a JSON line writes null, and the bounds were left out
        (
            {"seed": "x"},
            "seed='x' is invalid: Input should be a number, not a bool or a string; allowed: an integer "
            "0 <= seed < 2**64, or null (from --seed)",
        ),
    ],
)
def test_a_bad_field_of_a_line_says_what_a_json_line_may_hold(
    tmp_path: Path, field: dict[str, Any], message: str
) -> None:
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"prompt": "ROMEO"} | field) + "\n")
    result = _cli("generate", *FLAGS, "--input", str(source), "--output", str(output))
    assert result.returncode == 2
    assert result.stderr.startswith(f"decodekit: error: --input in.jsonl line 1: prompt line: {message}\n")


def test_a_line_past_the_context_is_advised_the_cache_flag(tmp_path: Path) -> None:
    # a line's ContextLengthError advised "cache='none'", the library's spelling; `generate PROMPT` says --cache none
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"prompt": "ROMEO " * 30}) + "\n")  # 180 characters, past the context of 128
    result = _cli("generate", *FLAGS, "--cache", "dense", "--input", str(source), "--output", str(output))
    assert result.returncode == 2 and "cache='" not in result.stderr
    assert result.stderr.startswith("decodekit: error: --input in.jsonl line 1: prompt of 180 tokens + max_new_tokens=")
    assert "or --cache none, which crops the context\n" in result.stderr


DEEP = '{"type": "array", "items": ' * 3000 + "{}" + "}" * 3000  # past Python's recursion limit to read


def test_json_nested_past_pythons_limit_is_the_lines_error_or_the_options(tmp_path: Path) -> None:
    """Before: "unexpected RecursionError" for the whole job (a line) or the command (--json-schema FILE)."""
    nesting = "JSON nested too deeply to read; allowed: JSON nested less deeply (llguidance takes a schema about 128"
    schema, source, output = tmp_path / "deep.json", tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    schema.write_text(DEEP)
    one = _cli("generate", "ROMEO", *FLAGS, "--json-schema", str(schema))
    assert one.returncode == 2 and one.stderr.startswith(f"decodekit: error: --json-schema {str(schema)!r}: {nesting}")
    source.write_text(json.dumps({"prompt": "ROMEO"}) + '\n{"prompt": "KING", "json_schema": ' + DEEP + "}\n")
    job = _cli("generate", *FLAGS, "--input", str(source), "--output", str(output), "--on-error", "skip")
    assert job.returncode == 0, job.stderr
    good, bad = (json.loads(line) for line in output.read_text().splitlines())
    assert good["line"] == 1 and "tokens" in good
    assert bad["line"] == 2 and bad["error"]["type"] == "ParameterError"
    assert bad["error"]["message"].startswith(nesting)

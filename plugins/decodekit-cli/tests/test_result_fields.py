"""A strategy's own result fields in `generate --json` and a batch job's records (docs/strategies.md, "What a strategy
returns"). The strategies are tests/cli_strategy_plugin.py's: `counted` adds `picks` (per row: one pick per token it
emitted); `clashing` adds fields the output cannot write beside one it can; `n_best` returns several sequences per
prompt and `drawn` per prompt. The commands run in this process (`cli_runner.run_cli`) on `cli-test-gpt`. Before:
`--json` and the records wrote none of these fields."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
from cli_runner import run_cli
from decodekit_cli.result_fields import TAKEN, own_fields

import decodekit as dk

MODEL = cli_testplugin.MODEL_NAME
PLUGINS = "cli_testplugin,cli_strategy_plugin"
# Rows that end apart (the stop string "b" ends some early), so a row's entry must reach that row's sample.
FLAGS = ["-m", MODEL, "--max-new-tokens", "8", "--temperature", "3", "--stop", "b"]
LINES: list[dict[str, Any]] = [
    {"prompt": "ab"},
    {"prompt": "abc", "n": 3},
    {"prompt": "a", "max_new_tokens": 2},
    {"prompt": "ba"},
]


def _cli(*args: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS=PLUGINS)
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), env, fresh_plugins=True)


def _job(tmp_path: Path, name: str, *args: str) -> tuple[Any, list[dict[str, Any]]]:
    """A batch job over `LINES` with `args`; its run and its records."""
    prompts, out = tmp_path / "in.jsonl", tmp_path / f"{name}.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    run = _cli("generate", "--input", str(prompts), "--output", str(out), *FLAGS, "--seed", "0", *args)
    assert run.returncode == 0, run.stderr
    return run, [json.loads(line) for line in out.read_text().splitlines()]


def test_json_shows_each_rows_field_in_its_sample() -> None:
    run = _cli("generate", "ab", *FLAGS, "-n", "4", "--seed", "0", "--strategy", "counted", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert "picks" not in document
    samples = document["samples"]
    assert [s["picks"] for s in samples] == [len(s["tokens"]) for s in samples]
    assert len({s["picks"] for s in samples}) > 1  # rows of several lengths: each got its own entry


def test_records_carry_each_rows_field(tmp_path: Path) -> None:
    _, records = _job(tmp_path, "counted", "--strategy", "counted", "--batch-size", "6")
    one = [r for r in records if "samples" not in r]
    assert [r["picks"] for r in one] == [len(r["tokens"]) for r in one] and len(one) == 3
    [three] = [r["samples"] for r in records if "samples" in r]
    assert [s["picks"] for s in three] == [len(s["tokens"]) for s in three]
    _, alone = _job(tmp_path, "alone", "--strategy", "counted", "--batch-size", "1")
    assert alone == records  # a line's fields do not depend on the lines it shares a decode with


def test_a_field_named_as_a_key_of_the_output_or_of_a_value_json_cannot_hold_is_left_out_saying_so(
    tmp_path: Path,
) -> None:
    """`clashing` decodes as `sample` and adds `seed`, `id` and `acceptance_rate`, which the output has, a tensor per
    row, one entry too many (`notes`), and `prompt_length`: its records are `sample`'s, each with `prompt_length` and
    nothing overwritten."""
    said = [
        "decodekit: warning: Clashing.seed is left out: the output has a key 'seed' of its own; allowed: a field of "
        "another name",
        "decodekit: warning: Clashing.id is left out: the output has a key 'id' of its own; allowed: a field of "
        "another name",
        "decodekit: warning: Clashing.state is left out: an entry is a Tensor, which JSON cannot hold; allowed: null, "
        "booleans, finite numbers, strings, and lists and string-keyed objects of them",
        "decodekit: warning: Clashing.notes is left out: it is not one entry per row; allowed: a list with one entry "
        "per prompt (Decoding.extras)",
        "decodekit: warning: Clashing.acceptance_rate is left out: the output has a key 'acceptance_rate' of its own; "
        "allowed: a field of another name",
    ]
    run, records = _job(tmp_path, "clashing", "--strategy", "clashing", "--batch-size", "1")  # 4 decodes: said once
    assert run.stderr.splitlines()[:-1] == said
    _, plain = _job(tmp_path, "plain", "--batch-size", "1")
    lengths = [len(line["prompt"]) for line in LINES]
    assert [r.pop("prompt_length", None) for r in records[:1] + records[2:]] == lengths[:1] + lengths[2:]
    assert [s.pop("prompt_length") for s in records[1]["samples"]] == [lengths[1]] * 3
    assert records == plain
    document = _cli("generate", "ab", *FLAGS, "--seed", "0", "--strategy", "clashing", "--json")
    assert document.stderr.splitlines() == said
    report = json.loads(document.stdout)
    assert report["seed"] == 0 and "acceptance_rate" not in report  # not speculative's
    assert [(s["prompt_length"], {"seed", "id", "state", "notes"} & set(s)) for s in report["samples"]] == [(2, set())]


def test_every_sequence_a_row_returns_carries_its_rows_field(tmp_path: Path) -> None:
    """`n_best` returns the best 2 of its `best_of` samples per prompt, and `drawn`, per prompt: each of the samples
    shown carries it (its other fields, beam search's, are those samples)."""
    run = _cli("generate", "ab", *FLAGS, "--seed", "0", "--strategy", "n_best(best_of=3)", "-n", "2", "--json")
    assert run.returncode == 0, run.stderr
    samples = json.loads(run.stdout)["samples"]
    assert [s["drawn"] for s in samples] == [3, 3] and not any("sequences" in s for s in samples)
    _, records = _job(tmp_path, "n_best", "--strategy", "n_best(best_of=3)", "-n", "2")
    assert [[s["drawn"] for s in r["samples"]] for r in records] == [[3] * line.get("n", 2) for line in LINES]


def test_the_names_the_output_keeps_for_itself_are_every_key_it_writes(tmp_path: Path) -> None:
    """`TAKEN` is what a strategy's field may not be called: a key `--json` or a record writes that it lacked would
    be overwritten by a field of that name."""
    keys: set[str] = set()

    def add(value: dict[str, Any]) -> None:
        keys.update(value)
        for sample in value.get("samples", []):
            keys.update(sample)

    asked = ["--logprobs", "1", "--prompt-logprobs", "1", "--seed", "0"]
    for extra in (["-n", "2"], ["--strategy", "beam(num_beams=2)", "-n", "2"]):
        run = _cli("generate", "ab", *FLAGS, *asked, *extra, "--json")
        assert run.returncode == 0, run.stderr
        add(json.loads(run.stdout))
    LINES.append({"prompt": "a", "seed": -1})  # an error record
    try:
        _, records = _job(tmp_path, "keys", *asked, "--on-error", "skip")
    finally:
        LINES.pop()
    for record in records:
        add(record)
    assert "error" in keys and "score" in keys and keys <= TAKEN, keys - TAKEN


@dataclass
class _Mine(dk.Generation):
    per_row: list[Any] = field(default_factory=list)
    too_long: list[int] = field(default_factory=list)
    pair: tuple[int, int] = (0, 0)
    ratio: list[float] = field(default_factory=list)
    table: list[dict[Any, str]] = field(default_factory=list)


def test_a_field_of_one_json_entry_per_row_is_written_and_any_other_left_out_saying_why() -> None:
    result = _Mine(
        tokens=[[1], [2, 3]],
        finish_reasons=["length", "length"],
        prompt_tokens=[[0], [0]],
        per_row=[{"a": [1.5, None]}, (True, "x")],
        too_long=[1, 2, 3],
        pair=(4, 5),  # two entries, as the rows: a tuple is a list to JSON
        ratio=[0.5, float("nan")],
        table=[{"x": "y"}, {1: "x"}],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        own = own_fields(result)
    assert own == [{"per_row": {"a": [1.5, None]}, "pair": 4}, {"per_row": (True, "x"), "pair": 5}]
    assert [str(w.message).split(": ")[1].split(";")[0] for w in caught] == [
        "it is not one entry per row",
        "an entry is nan, which JSON cannot hold",
        "an entry is a dict, which JSON cannot hold",
    ]
    assert own_fields(None) == []  # an interrupted run has no result: no fields


@pytest.mark.parametrize("strategy", ["sample", "beam(num_beams=2)"])
def test_a_result_without_fields_of_its_own_is_written_as_before(strategy: str) -> None:
    run = _cli("generate", "ab", *FLAGS, "--seed", "0", "--strategy", strategy, "--json")
    sample_keys = {"text", "tokens", "finish_reason", "stopped_by", "tokens_per_second"}
    assert run.returncode == 0 and set(json.loads(run.stdout)["samples"][0]) == sample_keys, run.stderr

"""`decodekit generate --include-stop`: the stop string that ended a sample stays in its text, in the printed text,
the --json document and a batch job's records; the job records it in its settings, which `--resume` compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

import decodekit as dk

ARGS = ["-m", "tiny-shakespeare", "--chain", "temperature(0.9)", "--cache", "dense", "--ignore-eos"]
ARGS += ["--max-new-tokens", "40"]


def _free(seed: int | list[int]) -> str:
    """The text without a stop string, as the command generates it (`--seed 7`: 7; a batch line's 7: [7])."""
    model = dk.load_model("tiny-shakespeare")
    out: Any = dk.generate(model, ["ROMEO:"], chain="temperature(0.9)", max_new_tokens=40, seed=seed, cache="dense")
    return str(out.text[0])


@pytest.fixture(scope="module")
def free() -> str:
    return _free([7])


def test_generate_prints_and_reports_the_stop_string_kept() -> None:
    free = _free(7)
    stop = free[20:23]
    kept = free[: free.find(stop) + 3]
    run = run_cli(["generate", "ROMEO:", *ARGS, "--seed", "7", "--stop", stop, "--include-stop", "--json"])
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    sample = document["samples"][0]
    assert sample["text"] == kept and sample["stopped_by"] == stop
    assert document["include_stop"] is True  # the document says how its text was cut, as it says `stop`
    run = run_cli(["generate", "ROMEO:", *ARGS, "--seed", "7", "--stop", stop, "--include-stop"])
    assert run.returncode == 0 and kept in run.stdout, run.stderr
    run = run_cli(["generate", "ROMEO:", *ARGS, "--seed", "7", "--stop", stop, "--json"])
    assert json.loads(run.stdout)["samples"][0]["text"] == free[: free.find(stop)]


def test_a_batch_job_records_it_and_resume_compares_it(free: str, tmp_path: Path) -> None:
    stop = free[20:23]
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text(json.dumps({"prompt": "ROMEO:", "seed": 7}) + "\n")
    base = ["generate", "--input", str(prompts), "--output", str(out), *ARGS, "--stop", stop]
    run = run_cli([*base, "--include-stop"])
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["text"] == free[: free.find(stop) + 3]
    settings_file = tmp_path / "o.jsonl.settings.json"
    assert json.loads(settings_file.read_text())["include_stop"] is True
    run = run_cli([*base, "--resume"])
    assert run.returncode == 2 and "include_stop=True (this run: False)" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert run_cli([*base, "--include-stop", "--resume"]).returncode == 0


def test_resume_reads_settings_recorded_before_it_as_cutting_the_stop_string(free: str, tmp_path: Path) -> None:
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text(json.dumps({"prompt": "ROMEO:", "seed": 7}) + "\n")
    base = ["generate", "--input", str(prompts), "--output", str(out), *ARGS, "--stop", free[20:23]]
    assert run_cli(base).returncode == 0
    settings_file = tmp_path / "o.jsonl.settings.json"
    older = json.loads(settings_file.read_text())
    del older["include_stop"]
    settings_file.write_text(json.dumps(older))
    run = run_cli([*base, "--resume"])
    assert run.returncode == 0 and "1 already there" in run.stderr, run.stderr
    run = run_cli([*base, "--include-stop", "--resume"])
    assert run.returncode == 2 and "include_stop=False (this run: True)" in run.stderr, run.stderr


def test_a_line_sets_its_own_include_stop_over_the_jobs(free: str, tmp_path: Path) -> None:
    """A line's `include_stop` wins over `--include-stop` (given or not), as its `stop` wins over `--stop`; a bad value
    is that line's error record, naming the field and what is allowed. Before: an unknown field, an error record."""
    stop = free[20:23]
    kept, cut = free[: free.find(stop) + 3], free[: free.find(stop)]
    prompts = tmp_path / "p.jsonl"
    lines = [
        {"prompt": "ROMEO:", "seed": 7, "include_stop": True},
        {"prompt": "ROMEO:", "seed": 7, "include_stop": False},
        {"prompt": "ROMEO:", "seed": 7},
        {"prompt": "ROMEO:", "seed": 7, "include_stop": "yes"},
        {"prompt": "ROMEO:", "seed": 7, "include_stop": None},
    ]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for job, default in (([], cut), (["--include-stop"], kept)):
        out = tmp_path / f"o{len(job)}.jsonl"
        args = ["--input", str(prompts), "--output", str(out), *ARGS, "--stop", stop, *job, "--on-error", "skip"]
        run = run_cli(["generate", *args])
        assert run.returncode == 0, run.stderr
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r.get("text") for r in records] == [kept, cut, default, None, default]
        assert records[3]["error"] == {
            "type": "ParameterError",
            "message": "prompt line: include_stop='yes' is invalid: Input should be true or false; allowed: true or "
            "false, or null (--include-stop's)",
        }

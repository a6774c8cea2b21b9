"""`--resume` over an output with a gap keeps records in input order.

An interrupted `--ray` run writes what its actors finished, sorted by line: block 3 may be there without
block 2, and the error records of the lines checked up front are all there. A local `--resume` appended the
missing lines after them, so the output was no longer in input order (docs/cli.md: "records are in input
order"; a Ray job "may be resumed locally"). Found running a job on Ray, Ctrl-C, then `--resume` without `--ray`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cli_testplugin
from cli_runner import run_cli

FLAGS = ["-m", cli_testplugin.MODEL_NAME, "--max-new-tokens", "4", "--seed", "3", "--on-error", "skip"]
LINES = [{"prompt": "ROMEO"}, {"prompt": "JULIET", "n": 2}, {"prompt": "KING"}, {"prompt": ""}, {"prompt": "QUEEN"}]


def _cli(*args: str) -> Any:
    env = dict(os.environ, DECODEKIT_EXTRA_PLUGINS="cli_testplugin")
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    return run_cli(list(args), env, fresh_plugins=True)


def _run(source: Path, output: Path, *extra: str) -> None:
    result = _cli("generate", *FLAGS, "--input", str(source), "--output", str(output), *extra)
    assert result.returncode == 0, result.stderr


def test_resume_after_a_gap_writes_the_records_in_input_order(tmp_path: Path) -> None:
    source, whole, gapped = tmp_path / "in.jsonl", tmp_path / "whole.jsonl", tmp_path / "gapped.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    _run(source, whole)
    records = whole.read_text().splitlines(keepends=True)
    assert [json.loads(r)["line"] for r in records] == [1, 2, 3, 4, 5]
    # as an interrupted --ray run leaves it: lines 1, 3 (a later block) and 4 (an error record checked up front)
    gapped.write_text(records[0] + records[2] + records[3])
    (tmp_path / "gapped.jsonl.settings.json").write_text((tmp_path / "whole.jsonl.settings.json").read_text())
    _run(source, gapped, "--resume")
    assert gapped.read_text() == whole.read_text()

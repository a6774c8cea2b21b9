"""`decodekit generate --compile`: the tokens and records of the run without it, and, as it is not recorded,
a run without it resumed with it writes what one run writes.

Both compile (cli-test-gpt through the dense cache, a few tokens): in the compiling tests' worker. The
flag's failures, and its way to Ray's actors, are tested without compiling (`test_compiling.py`,
`plugins/decodekit-cli/tests/test_cli_edges.py`, `plugins/decodekit-ray/tests/test_compile_flag.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_batch import DENSE, _json, _run, _write_lines
from test_cli import cli_many, generate_args, ok_json

pytestmark = pytest.mark.xdist_group("compile")  # the compiling tests in one worker: inductor starts once


def test_generate_compile_gives_the_samples_of_the_eager_run() -> None:
    """--compile runs the model's forward (through the dense cache) and the chain's step under torch.compile."""
    args = generate_args("--cache", "dense", "--temperature", "0.9", "--top-k", "20", "--seed", "5", "-n", "2")
    eager, compiled = cli_many([*args, "--max-new-tokens", "12"], [*args, "--max-new-tokens", "12", "--compile"])
    assert [s["tokens"] for s in ok_json(compiled)["samples"]] == [s["tokens"] for s in ok_json(eager)["samples"]]


def test_resumed_with_compile_continues_a_run_without_it(tmp_path: Path) -> None:
    """--compile changes no result, so it is not recorded: a run without it, resumed with it, writes what one
    run writes (the lines --compile decodes included), and the recorded settings stay as they were."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt=f"Line {i}: " + "abc"[: i % 4]) for i in range(8)])
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    assert _run(prompts, whole, *DENSE).returncode == 0
    settings = Path(f"{whole}.settings.json").read_text()
    Path(f"{part}.settings.json").write_text(settings)  # as a run stopped after three lines leaves it
    part.write_text("".join(whole.read_text().splitlines(keepends=True)[:3]))
    r = _run(prompts, part, *DENSE, "--resume", "--compile")
    assert r.returncode == 0, r.stderr
    assert "5 results written" in r.stderr and "3 already there" in r.stderr
    assert part.read_text() == whole.read_text()
    assert Path(f"{part}.settings.json").read_text() == settings

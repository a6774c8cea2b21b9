"""`decodekit generate --strategy "speculative(...)"`: the acceptance rate on the status line and in JSON."""

from __future__ import annotations

import json

import pytest
from decodekit_cli import main
from decodekit_cli.generate_command import _status_line


def test_status_line_shows_acceptance() -> None:
    assert _status_line(40, 2.0, 1, 0.8125).endswith("20.0 tokens/s · 81% of drafted tokens accepted")
    assert "accepted" not in _status_line(40, 2.0, 1)


def test_generate_json_reports_acceptance(capsys: pytest.CaptureFixture[str]) -> None:
    strategy = "speculative(draft='tiny-shakespeare-draft', k=3)"
    command = ["generate", "ROMEO:", "--strategy", strategy, "--chain", "greedy", "--max-new-tokens", "30", "--json"]
    status = main(command)  # in this process: a new one would cost seconds and test nothing more
    out = capsys.readouterr()
    assert status == 0, out.err
    document = json.loads(out.out)
    assert 0.0 < document["acceptance_rate"] <= 1.0
    assert document["strategy"].startswith("speculative")


def test_draft_none_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`--strategy "speculative(draft=None)"` once ran prompt lookup silently; no draft at all is prompt lookup."""
    from decodekit_cli import main

    assert main(["generate", "ROMEO:", "--strategy", "speculative(draft=None)", "--max-new-tokens", "4"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == "decodekit: error: strategy speculative: draft=null is invalid; allowed: a string or a Model"

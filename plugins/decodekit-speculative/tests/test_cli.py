"""`decodekit generate --strategy "speculative(...)"`: the acceptance rate on the status line and in JSON."""

from __future__ import annotations

import json
import subprocess
import sys

from decodekit_cli.generate_command import _status_line


def test_status_line_shows_acceptance() -> None:
    assert _status_line(40, 2.0, 1, 0.8125).endswith("20.0 tokens/s · 81% of drafted tokens accepted")
    assert "accepted" not in _status_line(40, 2.0, 1)


def test_generate_json_reports_acceptance() -> None:
    strategy = "speculative(draft='tiny-shakespeare-draft', k=3)"
    command = ["-m", "decodekit_cli", "generate", "ROMEO:", "--strategy", strategy, "--chain", "greedy"]
    out = subprocess.run([sys.executable, *command, "--max-new-tokens", "30", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert 0.0 < document["acceptance_rate"] <= 1.0
    assert document["strategy"].startswith("speculative")

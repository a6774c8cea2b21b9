"""An actor's records are the command's, word for word, for lines the command never sends to Ray: those
of `decodekit_ray.generate`'s rows, which only the actors check. Run in this process, without Ray."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.defaults import DEFAULT_CHAIN
from decodekit_ray.decoder import LineDecoder
from test_cli import MODEL, cli

import decodekit.plugins

PLUGINS = "cli_testplugin"
LINES = [  # each an error whose message holds a value or a type: JSON's words, not Python's
    b'{"prompt": "a", "n": true}',
    b'{"prompt": "a", "logprobs": 1000}',
    b'{"prompt": "a", "id": {"x": null}}',
    b'{"prompt": "a", "chain": "top_k(k=true) | sample"}',
]


def test_an_actors_error_records_are_the_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_bytes(b"".join(line + b"\n" for line in LINES))
    args = ["--input", str(prompts), "--output", str(out), "-m", MODEL, "--max-new-tokens", "3", "--seed", "0"]
    r = cli("generate", *args, "--on-error", "skip", DECODEKIT_EXTRA_PLUGINS=PLUGINS)
    assert r.returncode == 0, r.stderr
    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)  # no Ray: no GPU of its own
    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", PLUGINS)
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # built again with the test plugin, put back after
    settings = BatchSettings(model=MODEL, chain=DEFAULT_CHAIN, max_new_tokens=3, seed=0, cache="dense")
    batch = {"line": np.arange(1, len(LINES) + 1), "data": np.array(LINES, dtype=object)}
    records = list(LineDecoder(settings)(batch)["record"])
    assert "true" in records[0] and "null" in records[1]  # the words the command's records use
    assert records == out.read_text().splitlines(keepends=True)

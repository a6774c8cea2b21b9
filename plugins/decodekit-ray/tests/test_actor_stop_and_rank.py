"""An actor's records under `--include-stop` and `--logprobs` (each token's `rank`) are the command's, word for
word: both go through `decode_records` with the job's settings. Run in this process, without Ray."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from decodekit_cli.batch_settings import BatchSettings
from decodekit_ray.decoder import LineDecoder
from test_cli import cli

LINES = [b'{"prompt": "ROMEO:", "seed": 1}', b'{"prompt": "KING", "seed": 2}', b'{"prompt": "JULIET:", "seed": 3}']


def test_an_actors_records_keep_the_stop_string_and_rank_as_the_commands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_bytes(b"".join(line + b"\n" for line in LINES))
    args = ["-m", "tiny-shakespeare", "--chain", "temperature(0.9)", "--max-new-tokens", "30", "--cache", "dense"]
    args += ["--stop", "e", "--include-stop", "--logprobs", "1", "--seed", "0"]
    r = cli("generate", "--input", str(prompts), "--output", str(out), *args)
    assert r.returncode == 0, r.stderr
    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)  # no Ray: no GPU of its own
    model, chain = "tiny-shakespeare", "temperature(0.9)"
    settings = BatchSettings(model, chain, 30, 0, "dense", stop=("e",), include_stop=True, logprobs=1)
    batch = {"line": np.arange(1, len(LINES) + 1), "data": np.array(LINES, dtype=object)}
    records = sorted(LineDecoder(settings)(batch)["record"], key=lambda record: json.loads(record)["line"])
    assert records == out.read_text().splitlines(keepends=True)  # an actor's rows come as they end: sorted here
    parsed = [json.loads(record) for record in records]
    assert [r["text"].endswith("e") for r in parsed] == [r["finish_reason"] == "stop" for r in parsed] != [False] * 3
    assert all("rank" in score for r in parsed for score in r["logprobs"])

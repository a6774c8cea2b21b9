"""What an actor's decode warns (a line a grammar left incomplete) reaches the command, which prints it as the local
job does. It stayed in the actor's log: on Ray the command printed none of the local job's "--input line N (id N)
ended with json_schema incomplete (length)". In this process, without Ray: the actor's rows, then the parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from decodekit_cli.batch_settings import BatchSettings
from decodekit_ray.decoder import LineDecoder
from decodekit_ray.parts import PartsWatcher

SCHEMA = b'{"prompt": "A", "json_schema": {"type": "object"}}'  # 3 tokens cannot close an object's text


def test_an_actors_rows_carry_what_its_decode_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)
    # tiny-shakespeare: a grammar needs its tokenizer's bytes, which the test plugin's model does not state
    settings = BatchSettings(
        model="tiny-shakespeare", chain="temperature(0.8)", max_new_tokens=3, seed=0, cache="dense"
    )
    batch = {"line": np.array([4, 5, 6]), "data": np.array([b'{"prompt": "A"}', SCHEMA, SCHEMA], dtype=object)}
    rows = LineDecoder(settings, where="--input prompts.jsonl")(batch)  # the command's file, as the local job names it
    assert list(rows["warnings"]) == [
        "--input prompts.jsonl line 5 (id 5) ended with json_schema incomplete (length)\n"
        "--input prompts.jsonl line 6 (id 6) ended with json_schema incomplete (length)",
        "",
        "",
    ]


def test_the_parts_warnings_in_line_order_each_once(tmp_path: Path) -> None:
    def part(name: str, lines: list[int], said: list[str]) -> None:
        table = pa.table({"line": lines, "record": ["{}"] * len(lines), "tokens": [0] * len(lines), "warnings": said})
        pq.write_table(table, tmp_path / name)

    part("a.parquet", [9, 10], ["w9\nw10", ""])
    part("b.parquet", [2, 3], ["w2", ""])
    part("c.parquet", [9, 10], ["w9\nw10", ""])  # a block Ray retried after its actor died, written twice
    pq.write_table(pa.table({"line": [1], "record": ["{}"], "tokens": [0]}), tmp_path / "d.parquet")  # older: none
    watcher = PartsWatcher(tmp_path, lambda records, tokens: None, lines=set())
    watcher.poll()
    parts = watcher.parts
    assert parts.warnings_of({2, 3, 9, 10}) == ["w2", "w9", "w10"]
    assert parts.warnings_of({2, 3}) == ["w2"]  # lines of an earlier run, already printed then
    assert sorted(parts.records) == [1, 2, 3, 9, 10]

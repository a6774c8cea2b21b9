"""Assembling the parts a killed `--ray` run left, without Ray: every part is read a bounded number of times."""

from __future__ import annotations

from pathlib import Path

import decodekit_ray.parts
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from decodekit_cli.batch_decode import Pending
from decodekit_cli.batch_job import BatchJob
from decodekit_cli.batch_output import parts_path
from decodekit_cli.batch_records import dumps, result_record
from decodekit_cli.batch_settings import BatchSettings
from decodekit_ray.job import RayOptions, run_job


def _record(line: int) -> str:
    return dumps(
        result_record(
            id=line,
            line=line,
            prompt="p",
            text="t",
            tokens=[1],
            finish_reason="length",
            stopped_by=None,
            seed=line,
            chain="greedy",
            max_new_tokens=1,
        )
    )


def test_resuming_over_parts_reads_each_part_a_few_times_not_once_per_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `run_job` read every part once per pending line (`p.line not in part_records(parts)` in a loop),
    so resuming a large killed job read lines x parts Parquet files; now the parts are read once for that."""
    lines, per_part = 60, 3
    output = tmp_path / "out.jsonl"
    parts = parts_path(output)
    parts.mkdir()
    for first in range(1, lines + 1, per_part):  # a killed run that had written every record
        numbers = list(range(first, first + per_part))
        table = pa.table({"line": numbers, "record": [_record(n) for n in numbers], "tokens": [1] * per_part})
        pq.write_table(table, parts / f"part-{first:04d}.parquet")
    reads: list[Path] = []
    read = decodekit_ray.parts._read
    monkeypatch.setattr(decodekit_ray.parts, "_read", lambda path, columns: reads.append(path) or read(path, columns))
    settings = BatchSettings(model="m", chain="greedy", max_new_tokens=1, seed=0, cache="dense")
    pending: list[Pending | dict[str, object]] = [Pending(n, n, "p", [1], n, 1, "greedy") for n in range(1, lines + 1)]
    job = BatchJob(tmp_path / "in.jsonl", output, settings, pending, 0, 8, "skip")
    assert run_job(job, RayOptions()) == 0  # nothing left to decode: Ray is never started
    assert output.read_text() == "".join(_record(n) for n in range(1, lines + 1))
    n_parts = lines // per_part
    assert len(reads) <= 4 * n_parts, f"{len(reads)} reads of {n_parts} parts"

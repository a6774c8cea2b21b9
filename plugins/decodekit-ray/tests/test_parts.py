"""Assembling the parts a killed `--ray` run left, without Ray: every part is read a bounded number of times."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import decodekit_ray.job
import decodekit_ray.parts
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from decodekit_cli.batch_decode import Pending
from decodekit_cli.batch_job import BatchJob
from decodekit_cli.batch_output import parts_path
from decodekit_cli.batch_records import dumps, error_record, result_record, sequence
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.errors import CliError
from decodekit_ray.cluster import actor_failures_unlogged
from decodekit_ray.job import RayOptions, run_job


def _record(line: int) -> str:
    return dumps(
        result_record(
            id=line,
            line=line,
            prompt="p",
            sequences=[sequence(text="t", tokens=[1], finish_reason="length", stopped_by=None)],
            n=1,
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
    monkeypatch.setattr(decodekit_ray.parts, "_read", lambda path: reads.append(path) or read(path))  # type: ignore[func-returns-value]
    settings = BatchSettings(model="m", chain="greedy", max_new_tokens=1, seed=0, cache="dense")
    pending: list[Pending | dict[str, object]] = [Pending(n, n, "p", [1], n, 1, "greedy") for n in range(1, lines + 1)]
    job = BatchJob(tmp_path / "in.jsonl", output, settings, pending, 0, 8, "skip")
    assert run_job(job, RayOptions()) == 0  # nothing left to decode: Ray is never started
    assert output.read_text() == "".join(_record(n) for n in range(1, lines + 1))
    n_parts = lines // per_part
    assert len(reads) <= 4 * n_parts, f"{len(reads)} reads of {n_parts} parts"


def _error_line(line: int) -> str:
    return dumps(error_record(line, line, "RuntimeError", "the sampler failed"))


def test_resume_retries_a_line_that_failed_in_a_killed_runs_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: with --on-error fail, a line whose record in a killed run's parts was an error counted as done, so
    `--resume --ray` did not retry it (the docs say it does) and reported it failed again. Now it is decoded again
    and its new record, not the failure, is written."""
    output = tmp_path / "out.jsonl"
    parts = parts_path(output)
    parts.mkdir()
    old = pa.table({"line": [1, 2], "record": [_error_line(1), _record(2)], "tokens": [0, 1]})
    pq.write_table(old, parts / "part-0001.parquet")
    asked: list[list[int]] = []

    def decode(job: BatchJob, options: RayOptions, lines: list[int], folder: str) -> None:  # Ray, as it writes parts
        asked.append(lines)
        new = pa.table({"line": lines, "record": [_record(n) for n in lines], "tokens": [1] * len(lines)})
        pq.write_table(new, Path(folder) / "part-0002.parquet")

    monkeypatch.setattr(decodekit_ray.job, "_decode", decode)
    settings = BatchSettings(model="m", chain="greedy", max_new_tokens=1, seed=0, cache="dense")
    pending: list[Pending | dict[str, object]] = [Pending(n, n, "p", [1], n, 1, "greedy") for n in (1, 2, 3)]
    job = BatchJob(tmp_path / "in.jsonl", output, settings, pending, 0, 8, "fail")
    assert run_job(job, RayOptions()) == 0
    assert asked == [[1, 3]]
    assert output.read_text() == "".join(_record(n) for n in (1, 2, 3))


def test_the_end_of_a_job_reads_each_part_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the end of a job read every part twice, for its records and then for its warnings, after the progress
    watcher had read it for its tokens; now the watcher's one read gives all three, the warnings printed as before."""
    output = tmp_path / "out.jsonl"

    def decode(job: BatchJob, options: RayOptions, lines: list[int], folder: str) -> None:  # Ray, as it writes parts
        Path(folder).mkdir()
        for first in lines[::2]:
            block = [first, first + 1]
            said = [f"--input line {first} warned\n--input line {first + 1} warned", ""]
            table = pa.table({"line": block, "record": [_record(n) for n in block], "tokens": [1, 1], "warnings": said})
            pq.write_table(table, Path(folder) / f"part-{first:04d}.parquet")

    reads: list[str] = []
    read = decodekit_ray.parts._read
    monkeypatch.setattr(decodekit_ray.parts, "_read", lambda path: reads.append(path.name) or read(path))  # type: ignore[func-returns-value]
    monkeypatch.setattr(decodekit_ray.job, "_decode", decode)
    settings = BatchSettings(model="m", chain="greedy", max_new_tokens=1, seed=0, cache="dense")
    pending: list[Pending | dict[str, object]] = [Pending(n, n, "p", [1], n, 1, "greedy") for n in range(1, 7)]
    job = BatchJob(tmp_path / "in.jsonl", output, settings, pending, 0, 8, "skip")
    with pytest.warns(UserWarning) as said:
        assert run_job(job, RayOptions()) == 0
    assert [str(w.message) for w in said] == [f"--input line {n} warned" for n in range(1, 7)]
    assert output.read_text() == "".join(_record(n) for n in range(1, 7))
    assert sorted(reads) == ["part-0001.parquet", "part-0003.parquet", "part-0005.parquet"]


class _RayWriteError(OSError):
    """What Ray raises in the driver for a worker's OSError: an OSError whose message is the worker's traceback,
    the worker's own exception its `cause`."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(cause.errno, 'ray::Write() (pid=1)\n  File "parquet_datasink.py", line 395 ...')
        self.cause = cause


def test_a_full_disk_is_one_line_and_the_parts_stay_for_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a disk that filled while Ray wrote the parts ended the command with Ray's traceback as
    'unexpected RayTaskError(OSError)', and one that filled while the parts were assembled with 'unexpected
    OSError', leaving a half-written `out.jsonl.new` beside the parts. Now each is one line naming the output and
    the disk's error; the parts stay for `--resume --ray`, and nothing half-written is left."""
    output = tmp_path / "out.jsonl"
    full = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    def decode(job: BatchJob, options: RayOptions, lines: list[int], folder: str) -> None:  # a part, then full
        Path(folder).mkdir()
        table = pa.table({"line": lines[:1], "record": [_record(lines[0])], "tokens": [1]})
        pq.write_table(table, Path(folder) / f"part-{lines[0]:04d}.parquet")
        if lines[0] == 1:
            raise _RayWriteError(full)

    monkeypatch.setattr(decodekit_ray.job, "_decode", decode)
    settings = BatchSettings(model="m", chain="greedy", max_new_tokens=1, seed=0, cache="dense")
    pending: list[Pending | dict[str, object]] = [Pending(n, n, "p", [1], n, 1, "greedy") for n in (1, 2)]
    job = BatchJob(tmp_path / "in.jsonl", output, settings, pending, 0, 8, "skip")
    with pytest.raises(CliError) as wrote:
        run_job(job, RayOptions())
    written = "1 record written (--resume continues)"
    assert str(wrote.value) == f"--output {str(output)!r}: cannot write a record: No space left on device; {written}"
    assert output.read_text() == _record(1)

    def no_room(fd: int) -> None:  # the disk takes the parts, but not the output assembled from them
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(CliError) as assembled:
        run_job(job, RayOptions())
    assert str(assembled.value) == (
        f"--output {str(output)!r}: cannot assemble the records of out.jsonl.parts into it: No space left on device; "
        "they stay there, and --resume --ray continues once the disk has room for them twice"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "out.jsonl.parts"]
    assert output.read_text() == _record(1)


def test_ray_data_logs_no_traceback_of_a_full_disk() -> None:
    """Before: beside the command's line, Ray Data logged its Write task's failure on a full disk with ~180 lines
    of traceback, twice; the command says it in one line (above), so Ray Data logs none. Other OSErrors it logs."""
    handlers = logging.getLogger("ray.data").handlers
    assert handlers  # Ray Data's own: a file and stderr

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("ray.data.x", logging.ERROR, __file__, 1, "failed", None, (type(exc), exc, None))

    full = record(_RayWriteError(OSError(errno.ENOSPC, "No space left on device")))
    other = record(_RayWriteError(OSError(errno.ECONNRESET, "Connection reset by peer")))
    with actor_failures_unlogged():
        assert not any(h.filter(full) for h in handlers)
        assert all(h.filter(other) for h in handlers)

"""The parts a Ray job writes beside its output, watched for progress and assembled at the end.

Ray Data's `write_parquet` writes each block of records as a file of `results.jsonl.parts/`; a
file is complete once Parquet can read its footer, so a file cut short by a kill is simply not
a part yet. The driver counts complete parts for the progress bar and, at the end (or after an
interruption), merges them with the records the output already held, sorted by input line, into
a new output that replaces the old one in one rename: nothing is lost and no line appears twice.
"""

from __future__ import annotations

import errno
import json
import threading
from collections.abc import Callable, Collection
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from decodekit_cli.batch_records import is_error

__all__ = ["Parts", "PartsWatcher", "disk_error"]

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})  # what no retry of Ray's can mend


def _read(path: Path) -> pa.Table | None:
    """A part, or None for a file still being written (or cut short)."""
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException):
        return None


def disk_error(exc: BaseException) -> OSError | None:
    """The full (or read-only) disk behind `exc`, where that is what failed: Ray raises a worker's OSError in the
    driver as an OSError whose message is the worker's traceback and whose `cause` is the worker's exception."""
    cause = getattr(exc, "cause", exc)
    return cause if isinstance(cause, OSError) and cause.errno in DISK_FULL else None


class Parts:
    """What the complete parts read so far hold: a record per input line (a retried block's copy once; a result
    over an error record, which a resumed run retried), and the warnings each block's decode raised, by the line
    whose row carries them (the block's first)."""

    def __init__(self) -> None:
        self.records: dict[int, str] = {}
        self.warnings: dict[int, list[str]] = {}

    def add(self, table: pa.Table) -> None:
        """One part's rows (a part written before the `warnings` column existed has none)."""
        said = table.column("warnings").to_pylist() if "warnings" in table.column_names else [""] * table.num_rows
        for line, record, text in zip(table.column("line").to_pylist(), table.column("record").to_pylist(), said):
            old = self.records.get(line)
            if old is None or (is_error(json.loads(old)) and not is_error(json.loads(record))):
                self.records[line] = record
            if text:
                self.warnings.setdefault(line, text.split("\n"))

    def warnings_of(self, lines: Collection[int]) -> list[str]:
        """What the decodes of `lines` warned, each text once, in the order of their lines."""
        said = [text for line in sorted(self.warnings) if line in lines for text in self.warnings[line]]
        return list(dict.fromkeys(said))


class PartsWatcher:
    """Polls `folder` while a job runs, reading each complete part once: into `parts`, and `on_part(records,
    tokens)` for it, counting only `lines` (those the progress bar is over), each once. Read `parts` once the
    watcher has stopped (or before it starts: `poll()`)."""

    def __init__(
        self, folder: Path, on_part: Callable[[int, int], None], *, lines: Collection[int], every: float = 0.5
    ) -> None:
        self._folder, self._on_part, self._every = folder, on_part, every
        self.parts = Parts()
        self._seen: set[str] = set()
        self._todo = set(lines)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decodekit-ray-parts", daemon=True)

    def poll(self) -> None:
        for path in sorted(self._folder.glob("*.parquet")):
            table = None if path.name in self._seen else _read(path)
            if table is None:
                continue
            self._seen.add(path.name)
            self.parts.add(table)
            new = [(n, t) for n, t in zip(table.column("line").to_pylist(), table.column("tokens").to_pylist())]
            new = [(n, t) for n, t in new if n in self._todo]
            self._todo.difference_update(n for n, _ in new)
            self._on_part(len(new), sum(t for _, t in new))

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.poll()

    def __enter__(self) -> PartsWatcher:
        self.poll()  # parts a killed run left count as done
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

"""The parts a Ray job writes beside its output, watched for progress and assembled at the end.

Ray Data's `write_parquet` writes each block of records as a file of `results.jsonl.parts/`; a
file is complete once Parquet can read its footer, so a file cut short by a kill is simply not
a part yet. The driver counts complete parts for the progress bar and, at the end (or after an
interruption), merges them with the records the output already held, sorted by input line, into
a new output that replaces the old one in one rename: nothing is lost and no line appears twice.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from decodekit_cli.batch_records import is_error

__all__ = ["PartsWatcher", "part_records", "part_warnings"]


def _read(path: Path, columns: list[str]) -> pa.Table | None:
    """A part's columns, or None for a file still being written (or cut short)."""
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException):
        return None


def part_records(folder: Path) -> dict[int, str]:
    """Every record in the complete parts of `folder`, by input line (a retried block's copy once; a result
    over an error record, which a resumed run retried)."""
    records: dict[int, str] = {}
    for path in sorted(folder.glob("*.parquet")):
        table = _read(path, ["line", "record"])
        if table is not None:
            for line, record in zip(table.column("line").to_pylist(), table.column("record").to_pylist()):
                if line not in records or (is_error(json.loads(records[line])) and not is_error(json.loads(record))):
                    records[line] = record
    return records


def part_warnings(folder: Path, lines: Collection[int]) -> list[str]:
    """The warnings the actors' decodes of `lines` raised, by the complete parts of `folder` (a retried block's once),
    in the order of their lines. Parts written before the column existed have none."""
    said: dict[str, int] = {}
    for path in sorted(folder.glob("*.parquet")):
        table = _read(path, ["line", "warnings"])
        if table is not None:
            for line, text in zip(table.column("line").to_pylist(), table.column("warnings").to_pylist()):
                if line in lines and text:
                    said.update((t, line) for t in text.split("\n") if t not in said)
    return sorted(said, key=said.__getitem__)


class PartsWatcher:
    """Polls `folder` while a job runs: `on_part(records, tokens)` for each complete part, counting
    only `lines` (those the progress bar is over), each once."""

    def __init__(
        self, folder: Path, on_part: Callable[[int, int], None], *, lines: Collection[int], every: float = 0.5
    ) -> None:
        self._folder, self._on_part, self._every = folder, on_part, every
        self._seen: set[str] = set()
        self._todo = set(lines)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decodekit-ray-parts", daemon=True)

    def poll(self) -> None:
        for path in sorted(self._folder.glob("*.parquet")):
            table = None if path.name in self._seen else _read(path, ["line", "tokens"])
            if table is None:
                continue
            self._seen.add(path.name)
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

"""The engine's warning about rows a grammar left unfinished, said of a batch job's lines.

The engine names rows of its decode (`UnfinishedRowsWarning`: "1 of 1 rows ended with json_schema incomplete: rows 0
(length)"): in a batch job that is no line of the input, a copy added under `--compile` counts as a row, and Python
shows one text once, so of three lines that ended alike one warning was shown. Here each line that ended so is one
warning of its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

from decodekit.errors import UnfinishedRowsWarning

__all__ = ["said_of_lines"]

E = TypeVar("E", bound="Event")


class Event(Protocol):
    @property
    def finish_reason(self) -> str | None: ...


class Line(Protocol):
    @property
    def line(self) -> int: ...

    @property
    def id(self) -> str | int: ...


def said_of_lines(events: Iterator[E], lines: Sequence[Line], where: str = "--input") -> Iterator[E]:
    """`events` (a decode of `lines`: one row each, copies included), with the engine's unfinished-rows warning
    said per line of the input `where` ("--input prompts.jsonl", as the job's other messages about a line). The
    engine warns once every row has ended (or at once, with nothing to generate), so warnings are caught around the
    first event and those after the last row's end only: catching costs ~5 us an event."""
    ended, first = 0, True
    while True:
        if first or ended >= len(lines):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                event = next(events, None)
            for warning in caught:
                _rewarn(warning, lines, where)
        else:
            event = next(events, None)
        if event is None:
            return
        first, ended = False, ended + (event.finish_reason is not None)
        yield event


def _rewarn(warning: warnings.WarningMessage, lines: Sequence[Line], where: str) -> None:
    said = warning.message
    if not isinstance(said, UnfinishedRowsWarning):
        warnings.warn_explicit(said, warning.category, warning.filename, warning.lineno)
        return
    seen: set[int] = set()
    for row, reason in said.rows:
        line = lines[row]
        if line.line not in seen:  # not a copy of it added to fill a compiled batch
            seen.add(line.line)
            warnings.warn(f"{where} line {line.line} (id {line.id!r}) ended with {said.what} ({reason})", stacklevel=2)

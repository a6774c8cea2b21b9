"""The engine's warning about rows a grammar left unfinished, said of a batch job's lines.

The engine names rows of its decode ("1 of 1 rows ended with json_schema incomplete: rows 0 (length)"): in a batch
job that is no line of the input, a copy added under `--compile` counts as a row, and Python shows one text once, so
of three lines that ended alike one warning was shown. Here each line that ended so is one warning of its own.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

__all__ = ["said_of_lines"]

_UNFINISHED = re.compile(r"(?P<count>\d+) of \d+ rows ended with (?P<what>.+?): rows (?P<rows>.*)")
_ROW = re.compile(r"(\d+) \((\w+)\)")
E = TypeVar("E", bound="Event")


class Event(Protocol):
    @property
    def finish_reason(self) -> str | None: ...


class Line(Protocol):
    @property
    def line(self) -> int: ...

    @property
    def id(self) -> str | int: ...


def said_of_lines(events: Iterator[E], lines: Sequence[Line]) -> Iterator[E]:
    """`events` (a decode of `lines`: one row each, copies included), with the engine's unfinished-rows warning
    said per line. The engine warns once every row has ended (or at once, with nothing to generate), so warnings
    are caught around the first event and those after the last row's end only: catching costs ~5 us an event."""
    ended, first = 0, True
    while True:
        if first or ended >= len(lines):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                event = next(events, None)
            for warning in caught:
                _rewarn(warning, lines)
        else:
            event = next(events, None)
        if event is None:
            return
        first, ended = False, ended + (event.finish_reason is not None)
        yield event


def _rewarn(warning: warnings.WarningMessage, lines: Sequence[Line]) -> None:
    said = _UNFINISHED.fullmatch(str(warning.message))
    if said is None:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        return
    rows = [(int(row), reason) for row, reason in _ROW.findall(said["rows"])]
    seen: set[int] = set()
    for row, reason in rows:
        line = lines[row]
        if line.line not in seen:  # not a copy of it added to fill a compiled batch
            seen.add(line.line)
            said_of_one = f"--input line {line.line} (id {line.id!r}) ended with {said['what']} ({reason})"
            warnings.warn(said_of_one, stacklevel=2)
    if (more := int(said["count"]) - len(rows)) > 0:  # the engine names ten rows at most
        span = f"{lines[0].line}-{lines[-1].line}"
        warnings.warn(f"--input lines {span}: {more} more ended with {said['what']}", stacklevel=2)

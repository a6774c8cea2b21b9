"""The engine's unfinished-rows warning, said of a batch job's lines (`said_of_lines`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from decodekit_cli.batch_warnings import said_of_lines

from decodekit.errors import UnfinishedRowsWarning


@dataclass(frozen=True)
class Line:
    line: int
    id: str | int


@dataclass(frozen=True)
class Event:
    finish_reason: str | None


def decode(what: str, rows: int, ended: int | None = None) -> Iterator[Event]:
    """One event a row, each ending it, then the engine's warning as it warns, when the decode ends: the first
    `ended` rows (all: None) ended with `what` unfinished, by length."""
    yield from [Event("length")] * rows
    said = [(b, "length") for b in range(rows if ended is None else ended)] or [(0, "length")]
    warnings.warn(UnfinishedRowsWarning(f"the engine's text, not shown: {what}", what, said), stacklevel=1)
    warnings.warn("another warning", RuntimeWarning, stacklevel=1)


def test_rows_are_lines_each_said_and_other_warnings_pass() -> None:
    lines = [Line(7 + i, f"p{i}") for i in range(12)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(said_of_lines(decode("regex incomplete", 12, ended=11), lines))) == 12
    said = [str(w.message) for w in caught]
    assert said[:2] == [
        "--input line 7 (id 'p0') ended with regex incomplete (length)",
        "--input line 8 (id 'p1') ended with regex incomplete (length)",
    ]
    assert len(said) == 12 and said[10] == "--input line 17 (id 'p10') ended with regex incomplete (length)"
    assert said[11] == "another warning" and caught[-1].category is RuntimeWarning


def test_a_copy_of_the_last_line_is_not_said_again() -> None:
    """Under --compile a short batch is filled with copies of its last line: 1 line, 3 rows."""
    last = Line(4, "p3")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(said_of_lines(decode("json_schema incomplete", 3), [last, last, last]))
    assert [str(w.message) for w in caught if w.category is UserWarning] == [
        "--input line 4 (id 'p3') ended with json_schema incomplete (length)"
    ]


def test_a_decode_with_nothing_to_generate_warns_at_once() -> None:
    """`max_new_tokens` 0: no event, and the engine's warning comes with the first (and only) step."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(said_of_lines(decode("regex incomplete", 0), [Line(2, "b")])) == []
    assert str(caught[0].message) == "--input line 2 (id 'b') ended with regex incomplete (length)"

"""The engine's unfinished-rows warning, said of a batch job's lines (`said_of_lines`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from decodekit_cli.batch_warnings import said_of_lines


@dataclass(frozen=True)
class Line:
    line: int
    id: str | int


@dataclass(frozen=True)
class Event:
    finish_reason: str | None


def decode(message: str, rows: int) -> Iterator[Event]:
    """One event a row, each ending it, then the engine's warning as it warns: when the decode ends."""
    yield from [Event("length")] * rows
    warnings.warn(message, stacklevel=1)
    warnings.warn("another warning", RuntimeWarning, stacklevel=1)


def test_rows_are_lines_copies_are_dropped_and_the_rest_counted() -> None:
    lines = [Line(7 + i, f"p{i}") for i in range(12)]
    rows = ", ".join(f"{b} (length)" for b in range(10))  # the engine names ten rows at most
    message = f"12 of 12 rows ended with regex incomplete: rows {rows} and 2 more"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(said_of_lines(decode(message, 12), lines))) == 12
    said = [str(w.message) for w in caught]
    assert said[:2] == [
        "--input line 7 (id 'p0') ended with regex incomplete (length)",
        "--input line 8 (id 'p1') ended with regex incomplete (length)",
    ]
    assert said[10:] == ["--input lines 7-18: 2 more ended with regex incomplete", "another warning"]
    assert caught[-1].category is RuntimeWarning


def test_a_copy_of_the_last_line_is_not_said_again() -> None:
    """Under --compile a short batch is filled with copies of its last line: 1 line, 3 rows."""
    last = Line(4, "p3")
    message = "3 of 3 rows ended with json_schema incomplete: rows 0 (length), 1 (length), 2 (length)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(said_of_lines(decode(message, 3), [last, last, last]))
    assert [str(w.message) for w in caught if w.category is UserWarning] == [
        "--input line 4 (id 'p3') ended with json_schema incomplete (length)"
    ]


def test_a_decode_with_nothing_to_generate_warns_at_once() -> None:
    """`max_new_tokens` 0: no event, and the engine's warning comes with the first (and only) step."""
    message = "1 of 1 rows ended with regex incomplete: rows 0 (length)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(said_of_lines(decode(message, 0), [Line(2, "b")])) == []
    assert str(caught[0].message) == "--input line 2 (id 'b') ended with regex incomplete (length)"

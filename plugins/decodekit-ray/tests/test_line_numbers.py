"""`decodekit_ray.generate`'s rows are numbered from 1, as a file's lines: a row of line 0 (a 0-based `enumerate`) is
refused. It was decoded, with a seed no line of a file gets, and the other rows with their neighbours' seeds.
`from_fields`' conversion runs here, in this process, on an Arrow table as Ray Data hands it over."""

from __future__ import annotations

import datetime
import decimal
import json

import pyarrow as pa
import pytest
from decodekit_ray.lines import _as_line_rows

from decodekit.errors import ParameterError


@pytest.mark.parametrize("line", [0, -3])
def test_a_row_numbered_below_1_is_refused(line: int) -> None:
    table = pa.table({"line": [line, line + 1], "prompt": ["ROMEO:", "JULIET:"]})
    with pytest.raises(ParameterError) as caught:
        _as_line_rows(table)
    assert str(caught.value) == (
        f"line={line} is invalid; allowed: an integer >= 1, the row's line number counted from 1 (its default id "
        "and seed are those of that line of a file)"
    )


def test_rows_numbered_from_1_are_prompt_lines() -> None:
    rows = _as_line_rows(pa.table({"line": [1, 2], "prompt": ["ROMEO:", None], "seed": [None, 5]}))
    assert list(rows["line"]) == [1, 2]
    assert [json.loads(data) for data in rows["data"]] == [{"prompt": "ROMEO:"}, {"seed": 5}]


@pytest.mark.parametrize(
    ("column", "kind"),
    [
        (pa.array([datetime.datetime(2026, 1, 1), None]), "timestamp[us]"),
        (pa.array([b"ROMEO:", b"\xff"]), "binary"),
        (pa.array([decimal.Decimal(3), None], pa.decimal128(5, 0)), "decimal128(5, 0)"),
        (pa.array([[datetime.date(2026, 1, 1)], []]), "list<item: date32[day]>"),
    ],
)
def test_a_column_json_cannot_hold_is_named(column: pa.Array, kind: str) -> None:
    """Before: a Parquet column of timestamps, bytes or decimals (a data set's metadata, say) failed the job with
    Ray's traceback of `TypeError: Object of type datetime is not JSON serializable`; now it is one error naming it."""
    table = pa.table({"line": [1, 2], "prompt": ["ROMEO:", "JULIET:"], "extra": column})
    with pytest.raises(ParameterError) as caught:
        _as_line_rows(table)
    assert str(caught.value).startswith(
        f"a dataset of prompts with column 'extra' of type {kind}, which a prompt line (JSON) cannot hold; allowed: "
    )


def test_columns_json_holds_are_prompt_lines() -> None:
    table = pa.table(
        {"line": [1], "prompt": ["ROMEO:"], "chain": [[{"name": "top_k", "params": {"k": 5}}]], "seed": [None]}
    )
    assert [json.loads(data) for data in _as_line_rows(table)["data"]] == [
        {"prompt": "ROMEO:", "chain": [{"name": "top_k", "params": {"k": 5}}]}
    ]

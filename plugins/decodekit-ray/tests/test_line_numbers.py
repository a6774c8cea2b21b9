"""`decodekit_ray.generate`'s rows are numbered from 1, as a file's lines: a row of line 0 (a 0-based `enumerate`) is
refused. It was decoded, with a seed no line of a file gets, and the other rows with their neighbours' seeds.
`from_fields`' conversion runs here, in this process, on an Arrow table as Ray Data hands it over."""

from __future__ import annotations

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

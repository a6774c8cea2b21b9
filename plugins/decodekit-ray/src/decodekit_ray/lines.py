"""Prompt lines as a Ray Dataset: rows `{"line": int, "data": bytes}`, one per non-blank line.

The file is read with Ray Data's `read_binary_files` and split exactly as the local job splits it
(`decodekit_cli.batch_input.input_lines`): on b"\\n" only, a leading BOM skipped, each line kept
as bytes so that invalid UTF-8 is that line's error record, not the reader's failure. (Ray's
`read_text` splits on U+2028 too, and `read_json` fails the whole file on one bad line.)
"""

from __future__ import annotations

import json
from collections.abc import Collection
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray.data
from decodekit_cli.batch_input import PromptLine, input_lines, not_text

from decodekit.errors import ParameterError

__all__ = ["FIELDS", "from_fields", "read_prompt_lines"]

FIELDS = tuple(PromptLine.model_fields)  # what a line of the input file may hold


def read_prompt_lines(path: str | Path, *, keep: Collection[int] | None = None) -> ray.data.Dataset:
    """The lines of the JSONL file at `path`, which every node must see; `keep`: only these line numbers."""
    if not Path(path).is_file():  # a folder would be read file by file, each numbered from 1: lines would clash
        raise ParameterError(
            f"read_prompt_lines: path {str(path)!r} is not a file; allowed: one JSONL file, whose lines are "
            "numbered from 1 (a line's number is its default id and seed)"
        )
    with open(path, "rb") as f:
        found = not_text(f.read(4))
    if found is not None:
        raise ParameterError(f"read_prompt_lines: path {str(path)!r} is {found}")
    files = ray.data.read_binary_files(str(Path(path).resolve()))
    return files.map_batches(partial(_split, keep=None if keep is None else frozenset(keep)), batch_size=None)


def _split(batch: dict[str, Any], keep: frozenset[int] | None) -> dict[str, Any]:
    lines = [line for data in batch["bytes"] for line in input_lines(bytes(data))]
    lines = [line for line in lines if keep is None or line.number in keep]
    return {
        "line": np.array([line.number for line in lines], dtype=np.int64),
        "data": np.array([line.data for line in lines], dtype=object),
    }


def from_fields(ds: ray.data.Dataset) -> ray.data.Dataset:
    """Rows of a line's fields (`FIELDS`: `prompt` or `prompt_token_ids`, optionally `id`, `seed`, `chain`, ..., as
    `read_json` or `read_parquet` gives them) and its `line` number, as prompt lines: each row becomes the JSON
    line it stands for (null fields left out), so it is checked as the file's lines are."""
    try:
        columns: list[str] | None = ds.columns()
    except pa.ArrowException:  # blocks whose types differ (a chain of strings, one of lists): read block by block
        columns = None
    if columns is not None and "line" not in columns:
        raise _no_line(columns)
    schema = ds.schema() if columns is not None else None
    if schema is not None and isinstance(schema.base_schema, pa.Schema):  # known: refused before any work
        _refuse_not_json(schema.base_schema)
    return ds.map_batches(_as_line_rows, batch_format="pyarrow", batch_size=None)


def _refuse_not_json(schema: pa.Schema) -> None:
    """A column JSON cannot hold (a timestamp, bytes, a decimal) would fail the conversion of every block."""
    for field in schema:
        if not _json_type(field.type):
            raise ParameterError(
                f"a dataset of prompts with column {field.name!r} of type {field.type}, which a prompt line (JSON) "
                "cannot hold; allowed: columns of strings, integers, floats and booleans, and lists and structs of "
                "them: drop it (ds.drop_columns) or convert it (ds.map_batches) first"
            )


def _json_type(kind: pa.DataType) -> bool:
    """Whether Arrow's Python values of this type are JSON's."""
    if isinstance(kind, pa.ExtensionType):  # Ray Data's column of Python objects (rows Arrow cannot type): as given
        return True
    if pa.types.is_dictionary(kind):
        return _json_type(kind.value_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _json_type(kind.value_type)
    if pa.types.is_struct(kind):
        return all(_json_type(kind.field(i).type) for i in range(kind.num_fields))
    scalar = (pa.types.is_null, pa.types.is_boolean, pa.types.is_integer, pa.types.is_float32, pa.types.is_float64)
    return any(test(kind) for test in scalar) or pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _no_line(columns: list[str]) -> ParameterError:
    return ParameterError(
        f"a dataset of prompts with columns {columns}; allowed: a 'line' column (the row's number: "
        "its default id and seed) beside the fields of a prompt line"
    )


def _as_line_rows(table: pa.Table) -> dict[str, Any]:
    if "line" not in table.column_names:
        raise _no_line(table.column_names)
    _refuse_not_json(table.schema)
    rows = table.to_pylist()  # exact Python ints: a seed near 2**64 survives, which NumPy's floats would not
    if bad := [row["line"] for row in rows if not isinstance(row["line"], int) or row["line"] < 1]:
        # A 0-based numbering (enumerate(prompts)) would decode every row with its neighbour's default seed.
        raise ParameterError(
            f"line={bad[0]!r} is invalid; allowed: an integer >= 1, the row's line number counted from 1 "
            "(its default id and seed are those of that line of a file)"
        )
    return {
        "line": np.array([row.pop("line") for row in rows], dtype=np.int64),
        "data": np.array(
            [json.dumps({k: v for k, v in row.items() if v is not None}).encode() for row in rows], dtype=object
        ),
    }

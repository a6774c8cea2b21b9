"""`read_prompt_lines` refuses what it cannot number as the command does, before Ray starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from decodekit_ray.lines import read_prompt_lines

import decodekit as dk


def test_a_folder_of_files_is_refused_not_numbered_twice(tmp_path: Path) -> None:
    """Before: a folder was read as every file in it, each numbered from line 1, so two files gave two
    line 1s and the records of one overwrote the other's (a set of records keyed by line)."""
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"prompt": "x"}\n')
    with pytest.raises(dk.ParameterError) as info:
        read_prompt_lines(tmp_path)
    assert str(info.value) == (
        f"read_prompt_lines: path {str(tmp_path)!r} is not a file; allowed: one JSONL file, whose lines are "
        "numbered from 1 (a line's number is its default id and seed)"
    )


@pytest.mark.parametrize(
    ("head", "kind"), [(b"PAR1\x15\x04", "a Parquet file"), (b"\x1f\x8b\x08\x00", "gzip-compressed")]
)
def test_a_parquet_or_compressed_file_is_refused_not_split_into_lines(tmp_path: Path, head: bytes, kind: str) -> None:
    """Before: split on its newline bytes, each piece an error record ('not JSON', 'invalid UTF-8'); the command
    refused it (batch_input.read_input), Python's read_prompt_lines did not."""
    path = tmp_path / "prompts"
    path.write_bytes(head + b"\n{garbage\n")
    with pytest.raises(dk.ParameterError) as info:
        read_prompt_lines(path)
    assert str(info.value).startswith(f"read_prompt_lines: path {str(path)!r} is {kind}; allowed: a JSONL file")

"""The records of a batch job's output: one JSON line per input line, a result or an error.

Every record names its input `line`, so `--resume` knows what is done even when two lines share an
id (the second one's record is the error that says so). JSON is written with ASCII escapes, so a
record is always one line of valid UTF-8 whatever its text holds.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["Record", "dumps", "error_record", "is_error", "record_line", "result_record"]

Record = dict[str, Any]


def result_record(
    *,
    id: str | int,
    line: int,
    prompt: str,
    text: str | None,
    tokens: list[int],
    finish_reason: str,
    stopped_by: int | str | None,
    seed: int,
    chain: str,
    max_new_tokens: int,
    logprobs: list[dict[str, Any]] | None = None,
    prompt_logprobs: list[dict[str, Any] | None] | None = None,
) -> Record:
    """A decoded line; `logprobs` and `prompt_logprobs` (see logprob_records) only when the line asks for them."""
    return {
        "id": id,
        "line": line,
        "prompt": prompt,
        "text": text,
        "tokens": tokens,
        "finish_reason": finish_reason,
        "stopped_by": stopped_by,
        "seed": seed,
        "chain": chain,
        "max_new_tokens": max_new_tokens,
        **({} if logprobs is None else {"logprobs": logprobs}),
        **({} if prompt_logprobs is None else {"prompt_logprobs": prompt_logprobs}),
    }


def error_record(id: str | int, line: int, kind: str, message: str) -> Record:
    """What a line that yields no result gets: `kind` is the exception's class name."""
    return {"id": id, "line": line, "error": {"type": kind, "message": message}}


def is_error(record: Record) -> bool:
    return "error" in record


def dumps(record: Record) -> str:
    """The record as one line of JSON, newline included."""
    return json.dumps(record, ensure_ascii=True) + "\n"


def record_line(text: str | bytes) -> int:
    """The input line a record of the output is for; ValueError when it is not a record."""
    value = json.loads(text)
    line = value.get("line") if isinstance(value, dict) else None
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        raise ValueError("no 'line'")
    return line

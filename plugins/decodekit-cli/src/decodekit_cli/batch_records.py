"""The records of a batch job's output: one JSON line per input line, a result or an error.

A line asking for one sequence holds it at the top level (`text`, `tokens`, ...); a line asking for `n` of them
(samples, or beam search's best beams) holds them in `samples`, as `decodekit generate --json` does.

Every record names its input `line`, so `--resume` knows what is done even when two lines share an
id (the second one's record is the error that says so). JSON is written with ASCII escapes, so a
record is always one line of valid UTF-8 whatever its text holds.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["Record", "dumps", "error_record", "is_error", "record_line", "record_tokens", "result_record", "sequence"]

Record = dict[str, Any]


def sequence(
    *,
    text: str | None,
    tokens: list[int],
    finish_reason: str,
    stopped_by: int | str | None,
    logprobs: list[dict[str, Any]] | None = None,
    seed: int | None = None,
    score: float | None = None,
    fields: Record | None = None,
) -> Record:
    """One generated sequence; `logprobs` only when asked for, a sample's own `seed` and a beam's `score` (its
    ranking) only in `samples`; `fields`: its row's entries of the strategy's own (result_fields)."""
    return {
        "text": text,
        "tokens": tokens,
        "finish_reason": finish_reason,
        "stopped_by": stopped_by,
        **({} if seed is None else {"seed": seed}),
        **({} if score is None else {"score": score}),
        **(fields or {}),
        **({} if logprobs is None else {"logprobs": logprobs}),
    }


def result_record(
    *,
    id: str | int,
    line: int,
    prompt: str | None,
    sequences: list[Record],
    n: int,
    seed: int,
    chain: str,
    max_new_tokens: int,
    prompt_logprobs: list[dict[str, Any] | None] | None = None,
    prompt_token_ids: list[int] | None = None,
) -> Record:
    """A decoded line: with `n` 1 its sequence's fields, else `n` and the sequences as `samples` (see `sequence`);
    `prompt_logprobs` (see logprob_records) only when the line asks for them. A line of token ids has them as
    `prompt_token_ids` and `prompt` null (vLLM's way: a decoding of ids may not encode back to them)."""
    if n == 1:
        (only,) = sequences
        found: Record = {key: value for key, value in only.items() if key != "logprobs"}
    else:
        found = {"n": n, "samples": sequences}
    return {
        "id": id,
        "line": line,
        "prompt": prompt,
        **({} if prompt_token_ids is None else {"prompt_token_ids": prompt_token_ids}),
        **found,
        "seed": seed,
        "chain": chain,
        "max_new_tokens": max_new_tokens,
        **({"logprobs": sequences[0]["logprobs"]} if n == 1 and "logprobs" in sequences[0] else {}),
        **({} if prompt_logprobs is None else {"prompt_logprobs": prompt_logprobs}),
    }


def record_tokens(record: Record) -> int:
    """The tokens a record holds, over all its samples (for the progress bar's rate)."""
    return sum(len(s["tokens"]) for s in record.get("samples", [record]) if "tokens" in s)


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

"""`generate --input prompts.jsonl`: reading and checking the prompt file, and what `--resume` skips.

Every line is checked before anything is generated, so a bad line costs no generation time:
it is reported with its line number and skipped (`--on-error skip`) or fails the run (`fail`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from decodekit.errors import DecodekitError
from decodekit.params import Params, validate_params
from decodekit_cli.errors import CliError

__all__ = ["Pending", "PromptLine", "done_ids", "read_prompts"]


class PromptLine(Params):
    """One line of the input file; what it leaves out comes from the command's options."""

    prompt: str = Field(min_length=1, description="text to continue")
    id: str | int | None = Field(None, description="names the result; default: the line number")
    seed: int | None = Field(None, ge=0, description="this prompt's own seed; default: derived from --seed")
    max_new_tokens: int | None = Field(None, ge=0, description="default: --max-new-tokens")
    chain: str | None = Field(None, description="default: --chain (or the flags)")


@dataclass(frozen=True)
class Pending:
    """A checked prompt: where it came from, and the request it makes."""

    line: int  # 1-based line number in the input file
    id: str | int
    prompt: str
    ids: str | list[int]  # the prompt as the model encodes it
    seed: int | None
    max_new_tokens: int
    chain: str


def done_ids(output: Path) -> set[str | int]:
    """The ids already in `output`; a last line cut short by an interruption is removed first."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if complete != data:  # an unfinished write: drop it, every complete result stays
        output.write_bytes(complete)
    found: set[str | int] = set()
    for number, line in enumerate(complete.decode().splitlines(), 1):
        try:
            found.add(json.loads(line)["id"])
        except (ValueError, KeyError, TypeError):
            raise CliError(f"--resume: {output} line {number} is not a result of decodekit generate") from None
    return found


def read_prompts(
    path: Path,
    *,
    check: Callable[[PromptLine], tuple[str | list[int], str]],
    default_max_new_tokens: int,
    on_error: str,
    warn: Callable[[str], None],
) -> list[Pending]:
    """Every valid line of `path`. `check(line)` returns (encoded prompt, chain text) or raises."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CliError(f"--input {str(path)!r}: cannot read it: {exc.strerror}") from None
    pending: list[Pending] = []
    seen: dict[str | int, int] = {}
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            item = _parse(raw, number, seen)
            ids, chain = check(item)
        except (CliError, DecodekitError) as exc:
            message = f"--input {path.name} line {number}: {exc}"
            if on_error == "fail":
                raise CliError(message + " (--on-error skip leaves such lines out)") from None
            warn(message + "; skipped")
            continue
        key = item.id if item.id is not None else number
        seen[key] = number
        max_new = item.max_new_tokens if item.max_new_tokens is not None else default_max_new_tokens
        pending.append(Pending(number, key, item.prompt, ids, item.seed, max_new, chain))
    return pending


def _parse(raw: str, number: int, seen: dict[str | int, int]) -> PromptLine:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CliError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, dict):
        raise CliError(f"a JSON {type(value).__name__}; allowed: an object with a 'prompt'")
    item = validate_params("prompt", PromptLine, value)
    assert isinstance(item, PromptLine)
    key = item.id if item.id is not None else number
    if key in seen:
        raise CliError(f"id {key!r} is also the id of line {seen[key]}; allowed: one line per id")
    return item

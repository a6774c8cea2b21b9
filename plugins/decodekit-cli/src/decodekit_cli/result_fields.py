"""A strategy's own result fields, as `generate --json` and a batch job's records write them.

A strategy may return a `Generation` subclass with dataclass fields of its own (speculative's `drafted` and
`accepted`). Each is written under its name: a list with one entry per row of the result gives each row's sequences
their entry, any other value is the whole result's (`--json` only: a batch record is its line's alone, whatever lines
shared its decode). A name the output already uses, or a value JSON cannot hold, is
left out with a warning: the output never loses a key of its own, and a plugin author reads why. Beam search's
fields of several sequences are shown as samples (`returned_sequences`), never as fields.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any

from decodekit.results import Generation

__all__ = ["HYPOTHESES", "NO_FIELDS", "TAKEN", "OwnFields", "own_fields"]

# A strategy's several sequences per prompt, which the command line shows as samples (beam search's, a best_of's).
HYPOTHESES = frozenset(
    {"sequences", "scores", "sequence_texts", "sequence_finish_reasons", "sequence_stopped_by", "sequence_logprobs"}
)
# Every key `--json` (its document and samples) and a batch record (and its samples) write of their own.
TAKEN = frozenset(
    {
        *("model", "prompt", "chain", "chain_spec", "cache", "strategy", "seed", "max_new_tokens", "stop"),
        *("include_stop", "ignore_eos", "samples", "tokens_per_second", "seconds", "interrupted", "acceptance_rate"),
        *("prompt_logprobs", "text", "tokens", "finish_reason", "stopped_by", "logprobs", "score"),
        *("id", "line", "n", "error"),
    }
)
JSON_VALUES = "null, booleans, finite numbers, strings, and lists and string-keyed objects of them"


@dataclass(frozen=True)
class OwnFields:
    """A result's own fields to write: each row's entries of the per-row ones, and the whole result's values."""

    rows: list[dict[str, Any]]
    whole: dict[str, Any]

    def row(self, r: int) -> dict[str, Any]:
        """Row `r`'s entries (none for a result that had none, or was never finished)."""
        return self.rows[r] if r < len(self.rows) else {}


NO_FIELDS = OwnFields([], {})


def own_fields(result: Generation | None, *, rows_only: bool = False) -> OwnFields:
    """The fields `type(result)` adds to `Generation` (beam search's aside), split into per-row entries (a list
    with one entry per row) and whole-result values (none if `rows_only`); what cannot be written is warned about
    and left out."""
    if result is None:
        return NO_FIELDS
    n = len(result.tokens)
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    whole: dict[str, Any] = {}
    what = type(result).__name__
    for name in _added_names(type(result)):
        value = getattr(result, name)
        per_row = isinstance(value, list) and len(value) == n
        if rows_only and not per_row:
            continue
        if name in TAKEN:
            said = f"{what}.{name} is left out of the output, which has a key {name!r} of its own"
            warnings.warn(f"{said}; allowed: a field of another name", stacklevel=2)
            continue
        if per_row:
            for entries, entry in zip(rows, value):
                if _writable(what, name, entry):
                    entries[name] = entry
        elif _writable(what, name, value):
            whole[name] = value
    return OwnFields(rows, whole)


def _added_names(result_type: type[Generation]) -> list[str]:
    """The dataclass fields of `result_type` that `Generation` lacks, in their order, beam search's aside."""
    base = {f.name for f in dataclasses.fields(Generation)}
    return [f.name for f in dataclasses.fields(result_type) if f.name not in base and f.name not in HYPOTHESES]


def _writable(what: str, name: str, value: object) -> bool:
    if _is_json(value):
        return True
    kind = repr(value) if isinstance(value, float) else f"a {type(value).__name__}"
    warnings.warn(
        f"{what}.{name} is left out of the output where its value is {kind}, which JSON cannot hold; allowed: "
        + JSON_VALUES,
        stacklevel=3,
    )
    return False


def _is_json(value: object) -> bool:
    """Whether JSON holds `value` as it is (a tuple as a list)."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False

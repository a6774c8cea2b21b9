"""A strategy's own result fields, as `generate --json` and a batch job's records write them.

A strategy may return a `Generation` subclass with fields of its own, one entry per prompt (`Decoding.extras`:
speculative's `drafted`, `accepted`, `draft_rounds` and `accepted_by_position`). Each row's entry is written under the
field's name beside its sequence's own keys. A field that is not one entry per row, a name the output already uses, or
an entry JSON cannot hold is left out with a warning: the output never loses a key of its own, and a plugin author reads
why. Beam search's fields of several sequences are shown as samples (`returned_sequences`), never as fields.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

from decodekit.results import Generation

__all__ = ["HYPOTHESES", "TAKEN", "own_fields"]

# A strategy's several sequences per prompt, which the command line shows as samples (beam search's, a best_of's).
HYPOTHESES = frozenset(
    {"sequences", "scores", "sequence_texts", "sequence_finish_reasons", "sequence_stopped_by", "sequence_logprobs"}
)
# Every key `--json` (its document and samples) and a batch record (and its samples) write of their own.
TAKEN = frozenset(
    {
        *("model", "prompt", "chain", "chain_spec", "cache", "strategy", "seed", "max_new_tokens", "stop"),
        *("include_stop", "ignore_eos", "samples", "tokens_per_second", "seconds", "interrupted"),
        *("acceptance_rate", "mean_acceptance_length"),
        *("prompt_logprobs", "text", "tokens", "finish_reason", "stopped_by", "logprobs", "score"),
        *("id", "line", "n", "error"),
    }
)
JSON_VALUES = "null, booleans, finite numbers, strings, and lists and string-keyed objects of them"


def own_fields(result: Generation | None) -> list[dict[str, Any]]:
    """Per row of `result`, its entries of the fields `type(result)` adds to `Generation` (beam search's aside);
    none for no result (an interrupted run). What cannot be written is warned about and left out."""
    if result is None:
        return []
    rows: list[dict[str, Any]] = [{} for _ in result.tokens]
    for name in _added_names(type(result)):
        if _writable(result, name):
            for entries, entry in zip(rows, getattr(result, name)):
                entries[name] = entry
    return rows


def _added_names(result_type: type[Generation]) -> list[str]:
    """The dataclass fields of `result_type` that `Generation` lacks, in their order, beam search's aside."""
    base = {f.name for f in dataclasses.fields(Generation)}
    return [f.name for f in dataclasses.fields(result_type) if f.name not in base and f.name not in HYPOTHESES]


def _writable(result: Generation, name: str) -> bool:
    """Whether `result.name` is one JSON entry per row under a name of its own; if not, a warning says why."""
    value, rows = getattr(result, name), len(result.tokens)
    if name in TAKEN:
        why, allowed = f"the output has a key {name!r} of its own", "a field of another name"
    elif not isinstance(value, (list, tuple)) or len(value) != rows:  # said alike for every batch of a job
        why, allowed = "it is not one entry per row", "a list with one entry per prompt (Decoding.extras)"
    elif bad := [entry for entry in value if not _is_json(entry)]:
        kind = repr(bad[0]) if isinstance(bad[0], float) else f"a {type(bad[0]).__name__}"
        why, allowed = f"an entry is {kind}, which JSON cannot hold", JSON_VALUES
    else:
        return True
    warnings.warn(f"{type(result).__name__}.{name} is left out: {why}; allowed: {allowed}", stacklevel=3)
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

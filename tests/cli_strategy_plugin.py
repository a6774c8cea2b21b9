"""A test plugin for the CLI tests: registers `two_scored`, a strategy whose result carries several scored
sequences per prompt (`scores`, `sequences`, ... as beam search's) but which has no `num_return_sequences`: the
command line shows the one sequence per prompt it streams, not the others (tests/.../test_returned_sequences.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import decodekit as dk
from decodekit.engine import sample_steps
from decodekit.params import NoParams

__all__ = ["register_strategies"]


@dataclass
class TwoScored(dk.Generation):
    sequences: list[list[list[int]]] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)
    sequence_texts: list[list[str | None]] = field(default_factory=list)
    sequence_finish_reasons: list[list[Any]] = field(default_factory=list)
    sequence_stopped_by: list[list[Any]] = field(default_factory=list)
    sequence_logprobs: list[list[Any]] = field(default_factory=list)


def two_scored(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """Two samples per prompt, both returned, the first as the prompt's row."""
    d.open(copies=2)
    yield from sample_steps(d)
    outs = [[d.outputs[2 * b], d.outputs[2 * b + 1]] for b in range(len(d.prompts))]
    for b, (first, _) in enumerate(outs):
        d.finish(b, first.tokens, first.logprobs)
    d.result_type = TwoScored
    d.extras = {
        "sequences": [[o.tokens for o in pair] for pair in outs],
        "scores": [[0.0, -1.0] for _ in outs],
        "sequence_texts": [[o.text for o in pair] for pair in outs],
        "sequence_finish_reasons": [[o.finish_reason for o in pair] for pair in outs],
        "sequence_stopped_by": [[o.stopped_by for o in pair] for pair in outs],
        "sequence_logprobs": [[None, None] for _ in outs],
    }


@dk.hookimpl
def register_strategies(register: Any) -> None:
    register("two_scored", two_scored, NoParams, "two samples per prompt, both scored")

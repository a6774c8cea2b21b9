"""A test plugin for the CLI tests: registers `two_scored`, a strategy whose result carries several scored
sequences per prompt (`scores`, `sequences`, ... as beam search's) but which has no `num_return_sequences`: the
command line shows the one sequence per prompt it streams, not the others; `n_best`, vLLM V0's `best_of` as a
plugin would write it: the `num_return_sequences` best of `best_of` samples, without beams
(tests/.../test_returned_sequences.py); and `counted` and `clashing`, `sample` with result fields of their own, which
`--json` and a batch job's records write or leave out (tests/.../test_result_fields.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

import decodekit as dk
from decodekit.engine import sample_steps
from decodekit.params import NoParams, Params

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


@dataclass
class NBest(TwoScored):
    drawn: list[int] = field(default_factory=list)  # per prompt: the samples it drew (a field of its own)


class NBestParams(Params):
    best_of: int = Field(default=2, ge=1)
    num_return_sequences: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _fits(self) -> NBestParams:
        if self.num_return_sequences > self.best_of:
            raise ValueError(f"num_return_sequences={self.num_return_sequences} must be <= best_of={self.best_of}")
        return self


def n_best(d: dk.Decoding, params: NBestParams) -> Iterator[None]:
    """`best_of` samples per prompt; the `num_return_sequences` of highest cumulative logprob, best first."""
    k = params.best_of
    d.open(copies=k, copies_option="best_of")
    score = [0.0] * len(d.rows)

    def add(picked: Any) -> None:
        for row, (lp, live) in enumerate(zip(picked.logprobs, d.live)):
            score[row] += lp.raw if live else 0.0

    yield from sample_steps(d, logprobs=d.request.logprobs or 0, after=add)
    picks = []  # each prompt's rows, best first
    for b in range(len(d.prompts)):
        picks.append(sorted(range(b * k, (b + 1) * k), key=lambda r: -score[r])[: params.num_return_sequences])
        d.finish(b, d.outputs[picks[b][0]].tokens, d.outputs[picks[b][0]].logprobs)
    kept = [[d.outputs[r] for r in rows] for rows in picks]
    d.result_type = NBest
    d.extras = {
        "drawn": [k for _ in picks],
        "sequences": [[o.tokens for o in best] for best in kept],
        "scores": [[score[r] for r in rows] for rows in picks],
        "sequence_texts": [[o.text for o in best] for best in kept],
        "sequence_finish_reasons": [[o.finish_reason for o in best] for best in kept],
        "sequence_stopped_by": [[o.stopped_by for o in best] for best in kept],
        "sequence_logprobs": [[o.logprobs for o in best] for best in kept],
    }


@dataclass
class Counted(dk.Generation):
    """A result with a field of its own, one entry per row, as a third-party strategy may add it."""

    picks: list[int] = field(default_factory=list)  # per row: the chain's picks while the row was live


def counted(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    """`sample`, counting each row's picks."""
    d.open()
    picks = [0] * len(d.rows)

    def add(picked: Any) -> None:
        for row, live in enumerate(d.live):
            picks[row] += live

    d.result_type = Counted
    d.extras = {"picks": picks}
    yield from sample_steps(d, after=add)


@dataclass
class Clashing(dk.Generation):
    """Fields the output cannot write beside one it can: names it has (`seed`, `id`, `acceptance_rate`), a value
    JSON cannot hold (a tensor per row), one entry too many (`notes`)."""

    seed: list[int] = field(default_factory=list)
    id: list[str] = field(default_factory=list)
    state: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    prompt_length: list[int] = field(default_factory=list)  # per row: its prompt's tokens: written
    acceptance_rate: list[float] = field(default_factory=list)  # not speculative's property of that name


def clashing(d: dk.Decoding, params: NoParams) -> Iterator[None]:
    import torch

    d.open()
    rows = range(len(d.rows))
    d.result_type = Clashing
    d.extras = {"seed": [-1 for _ in rows], "id": ["clash" for _ in rows], "state": [torch.zeros(1) for _ in rows]}
    d.extras["notes"] = ["one more"] + ["note" for _ in rows]
    d.extras["prompt_length"] = [len(prompt) for prompt in d.prompts]
    d.extras["acceptance_rate"] = [0.5 for _ in rows]
    yield from sample_steps(d)


@dk.hookimpl
def register_strategies(register: Any) -> None:
    register("counted", counted, NoParams, "sample, with each row's picks as a field")
    register("clashing", clashing, NoParams, "sample, with fields the command line cannot write")
    register("two_scored", two_scored, NoParams, "two samples per prompt, both scored")
    register("n_best", n_best, NBestParams, "the n best of best_of samples, by cumulative logprob")

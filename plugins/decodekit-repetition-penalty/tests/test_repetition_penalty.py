"""repetition_penalty: the sign rule, last_n, include_prompt, left padding, candidates, HF parity, the kit."""

from __future__ import annotations

import pytest
import torch
from decodekit_repetition_penalty.params import RepetitionPenaltyParams
from decodekit_repetition_penalty.repetition_penalty import RepetitionPenalty

import decodekit as dk
from decodekit.stage import Candidates
from decodekit.testing import NEG, ProcessorConformance, check_processor

X = torch.tensor([[2.0, -1.0, 0.5, 3.0, -0.2, NEG]])


def ctx_of(rows: list[list[int]], prompt_lengths: list[int] | None = None, step: int = 0) -> dk.DecodeContext:
    lengths = None if prompt_lengths is None else torch.tensor(prompt_lengths)
    return dk.DecodeContext(tokens=torch.tensor(rows), prompt_lengths=lengths, step=step)


def test_positive_logits_are_divided_negative_ones_multiplied() -> None:
    out = RepetitionPenalty(penalty=2.0)(X, ctx_of([[0, 1, 5]]))
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 0.5, 3.0, -0.2, NEG]]))


def test_a_penalty_below_one_rewards() -> None:
    out = RepetitionPenalty(penalty=0.5)(X, ctx_of([[0, 1]]))
    assert torch.equal(out, torch.tensor([[4.0, -0.5, 0.5, 3.0, -0.2, NEG]]))


def test_each_token_is_penalised_once() -> None:
    out = RepetitionPenalty(penalty=2.0)(X, ctx_of([[3, 3, 3, 1, 3]]))
    assert torch.equal(out, torch.tensor([[2.0, -2.0, 0.5, 1.5, -0.2, NEG]]))


def test_one_is_a_no_op() -> None:
    assert RepetitionPenalty(penalty=1.0)(X, ctx_of([[0, 1]])) is X


def test_last_n_counts_only_the_last_tokens() -> None:
    out = RepetitionPenalty(penalty=2.0, last_n=2)(X, ctx_of([[0, 1, 3]]))
    assert torch.equal(out, torch.tensor([[2.0, -2.0, 0.5, 1.5, -0.2, NEG]]))  # token 0 is too old


def test_include_prompt_false_counts_only_generated_tokens() -> None:
    p = RepetitionPenalty(penalty=2.0, include_prompt=False)
    assert torch.equal(p(X, ctx_of([[0, 1, 3]], step=1)), torch.tensor([[2.0, -1.0, 0.5, 1.5, -0.2, NEG]]))
    assert p(X, ctx_of([[0, 1, 3]], step=0)) is X  # nothing generated yet


def test_left_padding_is_not_a_repeated_token() -> None:
    x = X.expand(3, -1)
    # row 0: prompt [5, 4], padded with two 0s; row 1: prompt [0, 4] (0 is a real token), one pad;
    # row 2: prompt [1, 2, 3, 4]; then one generated token each (3, 3, 2)
    ctx = ctx_of([[0, 0, 5, 4, 3], [0, 0, 0, 4, 3], [1, 2, 3, 4, 2]], prompt_lengths=[2, 3, 4], step=1)
    out = RepetitionPenalty(penalty=2.0)(x, ctx)
    assert torch.equal(out[0], torch.tensor([2.0, -1.0, 0.5, 1.5, -0.4, NEG]))
    assert torch.equal(out[1], torch.tensor([1.0, -1.0, 0.5, 1.5, -0.4, NEG]))
    assert torch.equal(out[2], torch.tensor([2.0, -2.0, 0.25, 1.5, -0.4, NEG]))


def test_under_compile_the_same_values_padding_and_repeats_included() -> None:
    """Under compile the penalty writes with `index_put_` (inductor writes it in place): the eager values."""
    x = X.expand(3, -1)
    ctx = ctx_of([[0, 0, 5, 4, 4], [0, 0, 0, 4, 3], [1, 2, 3, 3, 2]], prompt_lengths=[2, 3, 4], step=1)
    compiled = torch.compile(RepetitionPenalty(penalty=2.0), fullgraph=True, backend="eager")
    out = compiled(x, ctx)
    assert torch.equal(out[0], torch.tensor([2.0, -1.0, 0.5, 3.0, -0.4, NEG]))
    assert torch.equal(out[1], torch.tensor([1.0, -1.0, 0.5, 1.5, -0.4, NEG]))
    assert torch.equal(out[2], torch.tensor([2.0, -2.0, 0.25, 1.5, -0.2, NEG]))


def test_a_row_without_real_tokens_is_left_alone() -> None:
    ctx = ctx_of([[0, 0], [1, 2]], prompt_lengths=[0, 2])
    out = RepetitionPenalty(penalty=2.0)(X.expand(2, -1), ctx)
    assert torch.equal(out[0], X[0])
    assert torch.equal(out[1], torch.tensor([2.0, -2.0, 0.25, 3.0, -0.2, NEG]))


def test_last_n_with_padding() -> None:
    ctx = ctx_of([[0, 0, 0, 2], [1, 2, 3, 4]], prompt_lengths=[1, 4])
    out = RepetitionPenalty(penalty=2.0, last_n=3)(X.expand(2, -1), ctx)
    assert torch.equal(out[0], torch.tensor([2.0, -1.0, 0.25, 3.0, -0.2, NEG]))  # only token 2 is real
    assert torch.equal(out[1], torch.tensor([2.0, -1.0, 0.25, 1.5, -0.4, NEG]))  # tokens 2, 3, 4


def test_on_candidates_penalises_and_sorts_again() -> None:
    c = Candidates(torch.tensor([[3.0, 2.0, 0.5, -1.0]]), torch.tensor([[3, 0, 2, 1]]))
    out = RepetitionPenalty(penalty=4.0).on_candidates(c, ctx_of([[3, 1]]))
    assert out.values.tolist() == [[2.0, 0.75, 0.5, -4.0]] and out.indices.tolist() == [[0, 3, 2, 1]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype: torch.dtype) -> None:
    out = RepetitionPenalty(penalty=2.0)(X.to(dtype), ctx_of([[0, 1]]))
    assert out.dtype == dtype
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 0.5, 3.0, -0.2, NEG]]).to(dtype))


@pytest.mark.parametrize("penalty", [0.7, 1.3, 2.5])
def test_matches_transformers(penalty: float) -> None:
    from transformers import RepetitionPenaltyLogitsProcessor

    g = torch.Generator().manual_seed(int(penalty * 10))
    x = torch.randn(4, 200, generator=g) * 3
    ids = torch.randint(0, 200, (4, 30), generator=g)
    ctx = dk.DecodeContext(tokens=ids, step=10)
    theirs = RepetitionPenaltyLogitsProcessor(penalty=penalty)(ids, x.clone())
    assert torch.equal(RepetitionPenalty(penalty=penalty)(x, ctx), theirs)
    theirs = RepetitionPenaltyLogitsProcessor(penalty=penalty, prompt_ignore_length=20)(ids, x.clone())
    assert torch.equal(RepetitionPenalty(penalty=penalty, include_prompt=False)(x, ctx), theirs)


def test_created_by_name_with_defaults() -> None:
    p = dk.create("repetition_penalty", penalty=1.1)
    assert isinstance(p, RepetitionPenalty)
    assert p.params == RepetitionPenaltyParams(penalty=1.1, last_n=None, include_prompt=True)
    assert dk.create("repetition_penalty", 1.2, 64, False).params.last_n == 64


@pytest.mark.parametrize(
    ("bad", "allowed"),
    [
        ({"penalty": 0}, "0.0001 <= penalty <= 10000"),
        ({"penalty": -1.5}, "0.0001 <= penalty"),
        ({"penalty": 3.4e38}, "penalty <= 10000"),
        ({"penalty": 1.1, "last_n": 0}, "1 <= last_n"),
    ],
)
def test_bad_parameters_name_parameter_value_and_range(bad: dict[str, object], allowed: str) -> None:
    name, value = list(bad.items())[-1]
    with pytest.raises(dk.ParameterError) as e:
        dk.create("repetition_penalty", **bad)
    assert f"{name}={value!r}" in str(e.value) and allowed in str(e.value)
    with pytest.raises(dk.ParameterError):
        RepetitionPenalty(**bad)


def test_unknown_parameter() -> None:
    with pytest.raises(dk.ParameterError, match=r"unknown parameter window=3; allowed parameters: penalty, last_n"):
        dk.create("repetition_penalty", penalty=1.1, window=3)


class TestRepetitionPenaltyConformance(ProcessorConformance):
    def make(self) -> RepetitionPenalty:
        return RepetitionPenalty(penalty=1.5)


class TestRepetitionPenaltyWindowConformance(ProcessorConformance):
    def make(self) -> RepetitionPenalty:
        return RepetitionPenalty(penalty=0.6, last_n=5)


class TestRepetitionPenaltyGeneratedConformance(ProcessorConformance):
    def make(self) -> RepetitionPenalty:
        return RepetitionPenalty(penalty=1.3, include_prompt=False)


class CountsPadding(RepetitionPenalty):
    """A broken penalty: every column of ctx.tokens counts, left padding (id 0) included."""

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        seen = logits.gather(1, ctx.tokens)
        return logits.scatter(1, ctx.tokens, self._penalise(seen))


def test_the_kit_catches_padding_counted_as_a_token() -> None:
    check_processor(RepetitionPenalty(penalty=1.5))  # the real one passes the same check
    with pytest.raises(AssertionError, match=r"alone vs in a batch of 4, left-padded history"):
        check_processor(CountsPadding(penalty=1.5))


def test_an_empty_vocabulary_is_returned_as_is() -> None:
    ctx = dk.DecodeContext(tokens=torch.tensor([[3, 5]]))
    out = RepetitionPenalty(penalty=1.5)(torch.empty(1, 0), ctx)
    assert out.shape == (1, 0)

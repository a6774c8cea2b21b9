"""The sampler kit fails a stage that writes into the context's token history: the chain's later stages
(a repetition penalty) and the decode loop read it after the stage, so the write silently changes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_greedy.greedy import Greedy
from decodekit_top_k.top_k import TopK
from torch import Tensor

import decodekit as dk
from decodekit.stage import Candidates
from decodekit.testing import check_processor, check_selector


class ZeroesTheHistory(TopK):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        ctx.tokens.zero_()
        return super().__call__(logits, ctx)


class OnCandidatesClampsTheHistory(TopK):
    def on_candidates(self, c: Candidates, ctx: dk.DecodeContext) -> Candidates:
        ctx.tokens.clamp_(max=3)
        return super().on_candidates(c, ctx)


class SelectorMarksItsPick(Greedy):
    def __call__(self, logits: Tensor, ctx: dk.DecodeContext) -> Tensor:
        picked = super().__call__(logits, ctx)
        ctx.tokens[:, -1] = picked  # "the history as it will be": the loop appends the pick itself
        return picked


FLAWS = [
    pytest.param(check_processor, TopK(k=3), ZeroesTheHistory(k=3), "on .* logits .*: modified ctx.tokens in place"),
    pytest.param(
        check_processor, TopK(k=3), OnCandidatesClampsTheHistory(k=3), "on_candidates .*: modified ctx.tokens"
    ),
    pytest.param(
        check_selector,
        Greedy(),
        SelectorMarksItsPick(),
        r"selector_marks_its_pick\(\) on .*: modified ctx.tokens in place",
    ),
]


@pytest.mark.parametrize(("check", "sound", "broken", "message"), FLAWS)
def test_the_kit_fails_a_stage_that_writes_the_history(
    check: Callable[[Any], None], sound: Any, broken: Any, message: str
) -> None:
    check(sound)
    with pytest.raises(AssertionError, match=message):
        check(broken)


def test_writing_the_history_changes_what_a_later_stage_sees() -> None:
    """Why it is a flaw: a repetition penalty after the stage penalises the tokens it wrote, not the history."""
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    penalty = dk.create("repetition_penalty", penalty=2.0)
    history = dk.testing.ctx_for(1, history=4)  # tokens 0, 1, 2, 3: each positive logit halved
    clean = dk.Chain([TopK(k=5), penalty]).process(logits, history)
    dirty = dk.Chain([ZeroesTheHistory(k=5), penalty]).process(logits, dk.testing.ctx_for(1, history=4))
    assert clean.tolist() == [[0.5, 1.0, 1.5, 2.0, 5.0]]
    assert dirty.tolist() == [[0.5, 2.0, 3.0, 4.0, 5.0]]  # the history it left: token 0 four times

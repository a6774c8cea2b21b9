"""A model left in training mode is warned about (a module starts in it; its dropout then draws in every forward,
greedy decoding included); one in eval mode, or without a dropout that draws, is not."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from decodekit_speculative.strategy import SpeculativeGeneration  # noqa: F401  (registers `speculative`)
from torch import Tensor, nn

import decodekit as dk
from decodekit.errors import TrainingModeWarning
from decodekit.testing.tiny_lm import TinyLM

PROMPT = [[3, 1, 4, 1, 5]]


class DropsOut(TinyLM):
    """Dropout on its hidden states, as built: a module of one's own starts in training mode."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(32)
        self.dropout = nn.Dropout(p)
        self.train()

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        out: Tensor = self.dropout(super().forward(input_ids, positions, cache))
        return out


def training_warnings(model: Any, **options: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dk.decode(model, PROMPT, max_new_tokens=4, **options)
    found = [w for w in caught if issubclass(w.category, TrainingModeWarning)]
    assert all(w.filename == __file__ for w in found)  # told at the line that asked to decode
    return [str(w.message) for w in found]


def test_a_model_left_in_training_mode_is_warned_about_and_told_the_fix() -> None:
    model = DropsOut()
    with pytest.warns(TrainingModeWarning):
        first = dk.generate(model, PROMPT * 8, max_new_tokens=6, chain="greedy", cache="dense").tokens
    assert len({tuple(row) for row in first}) > 1  # why it matters: one prompt, eight rows, greedy, apart
    messages = training_warnings(model)
    assert messages == [
        "decodekit: model DropsOut is in training mode: its dropout draws anew in every forward, "
        "greedy decoding included; model.eval() turns it off"
    ]


def test_after_eval_or_without_a_dropout_that_draws_nothing_is_said() -> None:
    assert training_warnings(DropsOut().eval()) == []
    assert training_warnings(DropsOut(p=0.0)) == []
    assert training_warnings(TinyLM(32).train()) == []  # training mode alone changes nothing it computes


def test_the_mode_is_read_per_request_not_remembered() -> None:
    model = DropsOut().eval()
    assert training_warnings(model) == []
    assert len(training_warnings(model.train())) == 1
    assert training_warnings(model.eval()) == []


def test_a_draft_model_in_training_mode_is_warned_about_too() -> None:
    messages = training_warnings(TinyLM(32), strategy="speculative(k=2)", draft=DropsOut())
    assert [m.split(" is ")[0] for m in messages] == ["decodekit: model DropsOut"]


@pytest.mark.parametrize("wrapped", [True, False])
def test_a_wrapper_is_judged_by_the_dropout_inside_it(wrapped: bool) -> None:
    """A wrapper module (as the HF bridge is) starts in training mode itself; its inner model's mode decides."""

    class Wrapper(nn.Module):
        def __init__(self, inner: TinyLM) -> None:
            super().__init__()
            self.inner, self.spec = inner, inner.spec

        def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
            out: Tensor = self.inner(input_ids, positions, cache)
            return out

    inner = DropsOut() if wrapped else DropsOut().eval()
    assert len(training_warnings(Wrapper(inner))) == (1 if wrapped else 0)

"""What the engine gives a stage that reads text and ends rows (a grammar): the tokenizer and each row's
prompt in its context under every strategy, `ends_row` asked with the prompt's index (which the beams of a
prompt share), one warning for rows that ended while such a stage calls them unfinished, and a row whose
every token the chain removed explained by the stages that did it."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
import torch

import decodekit as dk
from decodekit import engine
from decodekit.testing.tiny_lm import TinyLM

STRATEGIES = ["sample", "speculative(draft=ngram)", "beam(num_beams=2)"]


class Tokens:
    """A tokenizer for TinyLM(64): token i is the character chr(48 + i)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) - 48 for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(48 + i) for i in ids)


class WithTokenizer(TinyLM):
    def __init__(self) -> None:
        super().__init__(64)
        self.tokenizer = Tokens()


class Spy:
    """Leaves the logits alone; records what each call's context says, and what `ends_row` is asked."""

    def __init__(self, ends_at: int) -> None:
        self.ends_at = ends_at
        self.seen: list[tuple[Any, list[int]]] = []
        self.asked: set[tuple[int, int]] = set()  # (row, first generated token)

    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        index = list(range(ctx.batch_size)) if ctx.prompt_index is None else list(ctx.prompt_index)
        self.seen.append((ctx.tokenizer, index))
        return logits

    def ends_row(self, row: int, generated: Sequence[int]) -> str | None:
        self.asked.add((row, generated[0]))
        return "spy" if len(generated) >= self.ends_at else None

    def unfinished(self, row: int, generated: Sequence[int]) -> str | None:
        return None if len(generated) >= self.ends_at else "spy incomplete"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_context_carries_the_tokenizer_and_each_rows_prompt(strategy: str) -> None:
    model = WithTokenizer()
    spy = Spy(ends_at=3)
    chain = dk.Chain([spy], selector=dk.create("greedy"))
    dk.decode(model, ["12", "3"], strategy=strategy, chain=chain, max_new_tokens=5)
    assert spy.seen and all(tokenizer is model.tokenizer for tokenizer, _ in spy.seen)
    if strategy.startswith("beam"):  # two rows per prompt, each the beam of its prompt
        assert {tuple(index) for _, index in spy.seen} == {(0, 0, 1, 1)}
    elif strategy.startswith("speculative"):  # one context per row
        assert {tuple(index) for _, index in spy.seen} == {(0,), (1,)}
    else:
        assert {tuple(index) for _, index in spy.seen} == {(0, 1)}


def test_ends_row_is_asked_with_the_prompt_under_beam_search() -> None:
    """The beams of prompt b are rows 2b and 2b + 1, reordered every step; `ends_row` hears b."""
    spy = Spy(ends_at=3)
    out = dk.decode(TinyLM(64), [[1, 2], [3]], strategy="beam(num_beams=2)", chain=dk.Chain([spy]), max_new_tokens=8)
    assert {row for row, _ in spy.asked} == {0, 1}
    assert out.stopped_by == ["spy", "spy"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rows_a_stage_calls_unfinished_are_named_in_one_warning(strategy: str) -> None:
    chain = dk.Chain([Spy(ends_at=6)], selector=dk.create("greedy"))
    with pytest.warns(UserWarning, match=r"^2 of 2 rows ended with spy incomplete: rows 0 \(length\), 1 \(length\)$"):
        out = dk.decode(TinyLM(64), [[1, 2], [3]], strategy=strategy, chain=chain, max_new_tokens=4)
    assert out.finish_reasons == ["length", "length"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # finished by the stage: nothing to say
        out = dk.decode(TinyLM(64), [[1, 2], [3]], strategy=strategy, chain=chain, max_new_tokens=8)
    assert out.stopped_by == ["spy", "spy"]


def keep(ids: list[int]) -> Any:
    def only(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        out = torch.full_like(logits, float("-inf"))
        out[:, ids] = logits[:, ids]
        return out

    return only


@pytest.mark.parametrize("order", ["narrow first", "empty first"])
def test_a_row_emptied_by_two_stages_names_both(order: str) -> None:
    first, second = (keep([1, 2, 3]), keep([7, 8])) if order == "narrow first" else (keep([7, 8]), keep([1, 2, 3]))
    chain = dk.Chain([dk.create("temperature", value=0.9), first, second])
    with pytest.raises(
        dk.NumericsError,
        match=r"row 0: .*removed by the chain: stage 2 \(only\) removed the [23] "
        r"left by stage 1 \(only\)",
    ):
        dk.generate(TinyLM(64), [[1, 2]], chain=chain, max_new_tokens=2)
    with pytest.raises(dk.NumericsError, match=r"stage 2 \(only\) removed the [23] left by stage 1 \(only\)"):
        chain.distribution(torch.randn(1, 64), dk.DecodeContext(tokens=torch.tensor([[1]])))


def test_a_stage_that_removes_everything_alone_is_named_alone() -> None:
    chain = dk.Chain([keep([])])
    with pytest.raises(dk.NumericsError, match=r"removed by the chain: stage 0 \(only\) removed the 64 left$"):
        dk.generate(TinyLM(64), [[1, 2]], chain=chain, max_new_tokens=2)


def _remembered_warnings() -> int:
    """Entries in every module's `__warningregistry__`: Python's memory of each text warned from a line."""
    held = (getattr(module, "__warningregistry__", None) for module in list(sys.modules.values()))
    return sum(len(registry) for registry in held if isinstance(registry, dict))


def test_the_warnings_of_many_decodes_are_not_remembered_without_end() -> None:
    """Under Python's default filters a warned text is remembered for its line (`__warningregistry__`) while the
    process lives; the unfinished rows' warning names the decode's rows, so a service's texts differ from decode to
    decode, and each was kept: 300 decodes, 300 entries. Those kept stay at a bounded number (the repeated text is
    still shown once)."""

    class Numbered(Spy):  # a text of its own at each decode, as the rows named make it in a service
        calls = 0

        def unfinished(self, row: int, generated: Sequence[int]) -> str | None:
            return f"spy {Numbered.calls} incomplete"

    model, shown = TinyLM(64), []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")  # Python's own default action for a UserWarning: remembered per text
        dk.generate(model, [[1]], chain=dk.Chain([Numbered(ends_at=9)]), max_new_tokens=1)
        dk.generate(model, [[1]], chain=dk.Chain([Numbered(ends_at=9)]), max_new_tokens=1)
        assert len(said) == 1  # the same text again: shown once
        before = _remembered_warnings()
        for n in range(1, 301):
            Numbered.calls = n
            dk.generate(model, [[1]], chain=dk.Chain([Numbered(ends_at=9)]), max_new_tokens=1)
        shown = [str(w.message) for w in said]
        grown = _remembered_warnings() - before
    assert len(shown) == 301 and shown[-1] == "1 of 1 rows ended with spy 300 incomplete: rows 0 (length)"
    assert grown <= engine.WARNED_KEPT, f"{grown} warned texts remembered after 300 decodes"
    assert len(engine._warned) <= engine.WARNED_KEPT  # decodekit's own memory of them

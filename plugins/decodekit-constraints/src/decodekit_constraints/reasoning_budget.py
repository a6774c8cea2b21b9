"""Reasoning budget (llama.cpp `common/reasoning-budget.cpp`, `--reasoning-budget N`): a reasoning block (from the
`start` tokens, e.g. `<think>`, to the `end` tokens) may hold at most `budget` tokens; then the `forced` tokens
(by default `end`) are forced one per step, and the text goes on past the block.

Per row, over its generated tokens, a state machine as llama.cpp's `accept`:
  idle     -- the start sequence completes --> counting (budget left: `budget`; forcing at once if it is 0)
  counting -- the end sequence completes --> done; else one token of the budget spent; none left --> forcing,
              or waiting if the token leaves a UTF-8 character unfinished
  waiting  -- the end sequence completes --> done; a token that ends a whole character --> forcing
  forcing  -- each forced token --> the next; after the last --> done
  done     -- a new start sequence --> counting again (a fresh budget: models may open several blocks)
A sequence is matched as llama.cpp's `token_matcher` does: a token that breaks a partial match restarts it, at
1 if the token is the sequence's first. With `open`, the prompt already opened a block (a chat template that
ends its prompt with `<think>`): counting starts at the first generated token. While forcing, every token but
the one forced is removed.

A row's state is a function of its generated tokens alone (`Budgets`), kept per token prefix as the grammar
stages keep their parses, so speculative drafts, beams and a redone step need nothing undone.

As llama.cpp, a token is judged by its own bytes (`utf8.ends_a_character`, from the tokenizer's `token_bytes()`),
not by the text before it: a token of continuation bytes alone, the tail of a character begun before it, counts as
unfinished too, so the wait lasts until a token ends with a whole character of its own. Without a tokenizer that
states its bytes (ids only), every token counts as finished: the forced tokens follow at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from decodekit.compiling import eager
from decodekit.stage import ProcessorBase
from decodekit_constraints.params import ReasoningBudgetParams
from decodekit_constraints.sequences import check_token_ids
from decodekit_constraints.utf8 import unfinished_ids

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Budget", "Budgets", "Phase", "ReasoningBudget"]

MAX_HELD = 4096  # states held at most: their keys are whole prefixes (memory)


class Phase(Enum):
    IDLE = "idle"
    COUNTING = "counting"
    WAITING = "waiting"  # the budget ran out inside a UTF-8 character (llama.cpp's WAITING_UTF8)
    FORCING = "forcing"
    DONE = "done"


def matched(sequence: tuple[int, ...], at: int, token: int) -> tuple[int, bool]:
    """llama.cpp's `token_matcher.advance`: the position in `sequence` after `token`, and whether it completed."""
    if token == sequence[at]:
        return (0, True) if at + 1 == len(sequence) else (at + 1, False)
    return (1 if token == sequence[0] else 0), False


@dataclass(frozen=True)
class Budget:
    """A row's state after some generated tokens."""

    phase: Phase
    start_at: int = 0  # how much of the start sequence the latest tokens match
    end_at: int = 0  # how much of the end sequence
    left: int = 0  # tokens of the budget left while counting
    forced: int = 0  # forced tokens emitted while forcing

    def after(self, token: int, p: ReasoningBudgetParams, unfinished: frozenset[int]) -> Budget:
        """The state after one more token; `unfinished`: the ids whose bytes leave a character unfinished."""
        if self.phase in (Phase.IDLE, Phase.DONE):
            start_at, opened = matched(p.start, self.start_at, token)
            return _opened(p, start_at) if opened else replace(self, start_at=start_at)
        if self.phase in (Phase.COUNTING, Phase.WAITING):
            end_at, closed = matched(p.end, self.end_at, token)
            if closed:
                return Budget(Phase.DONE, self.start_at)
            if self.phase is Phase.WAITING:
                return replace(self, end_at=end_at) if token in unfinished else Budget(Phase.FORCING, self.start_at)
            left = self.left - 1
            if left > 0:
                return replace(self, end_at=end_at, left=left)
            # Out of budget: forcing, or (llama.cpp) waiting for a token that ends a whole character, the end anew.
            return Budget(Phase.WAITING if token in unfinished else Phase.FORCING, self.start_at)
        forced = self.forced + 1
        return Budget(Phase.DONE, self.start_at) if forced >= len(_forced(p)) else replace(self, forced=forced)


def _opened(p: ReasoningBudgetParams, start_at: int) -> Budget:
    """A block just opened: counting, or forcing at once with no budget."""
    return Budget(Phase.COUNTING, start_at, left=p.budget) if p.budget > 0 else Budget(Phase.FORCING, start_at)


def _forced(p: ReasoningBudgetParams) -> tuple[int, ...]:
    return p.end if p.forced is None else p.forced


class Budgets:
    """The states of rows, keyed by their generated tokens (int32 bytes); the longest prefix held is advanced over
    the rest (usually one token). A bounded LRU: a state evicted is rebuilt from an ancestor, never wrong.
    `unfinished`: the vocabulary's ids that leave a UTF-8 character unfinished (none: ids only)."""

    def __init__(
        self, params: ReasoningBudgetParams, unfinished: frozenset[int] = frozenset(), capacity: int = 64
    ) -> None:
        self.params, self.unfinished, self.capacity = params, unfinished, capacity
        self.first = _opened(params, 0) if params.open else Budget(Phase.IDLE)
        self._held: OrderedDict[bytes, Budget] = OrderedDict()

    def state(self, tokens: np.ndarray[Any, Any]) -> Budget:
        """The state after `tokens` (a row's generated tokens, int32)."""
        have, state = len(tokens), None
        while have > 0 and (state := self._held.get(tokens[:have].tobytes())) is None:
            have -= 1
        if state is None:
            state = self.first
        elif have == len(tokens):
            self._held.move_to_end(tokens.tobytes())
            return state
        if have < len(tokens) - 1:  # the parent was evicted: too few held for this decode (k drafts a row)
            self.capacity = max(self.capacity, min(2 * self.capacity, MAX_HELD))
        for i in range(have, len(tokens)):
            state = state.after(int(tokens[i]), self.params, self.unfinished)
        self._hold(tokens.tobytes(), state)  # not every prefix rebuilt: those would evict other rows' states
        return state

    def _hold(self, key: bytes, state: Budget) -> None:
        self._held[key] = state
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)


class ReasoningBudget(ProcessorBase[ReasoningBudgetParams]):
    """Force the end of a reasoning block once it holds `budget` tokens."""

    def __init__(self, params: ReasoningBudgetParams | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._budgets: dict[frozenset[int], Budgets] = {}  # by the vocabulary's unfinished ids (one per tokenizer)
        self._lock = threading.Lock()  # one stage may serve decodes in several threads
        p = self.params
        given = {"start": p.start, "end": p.end, "forced": p.forced or ()}
        self._largest = [(name, max(ids)) for name, ids in given.items() if ids]  # each checked by its own name

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        for name, largest in self._largest:
            check_token_ids(self.name, name, largest, logits.shape[-1])
        forced = _forced_tokens(self, ctx)  # [B]: the token each row must take, -1 where none
        if not bool((forced >= 0).any()):
            return logits
        rows = (forced >= 0).nonzero().view(-1)
        keep = torch.full_like(logits[rows], -torch.inf)
        columns = forced[rows].view(-1, 1)
        keep.scatter_(1, columns, logits[rows].gather(1, columns))
        out = logits.clone()
        out[rows] = keep
        return out

    def states(self, ctx: DecodeContext) -> list[Budget]:
        """Each row's state after its generated tokens."""
        history = (ctx.tokens if ctx.tokens.device.type == "cpu" else ctx.tokens.cpu()).numpy()
        generated = history[:, history.shape[1] - ctx.step :].astype(np.int32)  # [B, step]
        unfinished = unfinished_ids(ctx.tokenizer)
        with self._lock:
            budgets = self._budgets.get(unfinished)
            if budgets is None:
                budgets = self._budgets[unfinished] = Budgets(self.params, unfinished)
            budgets.capacity = max(budgets.capacity, 8 * len(generated))  # a few steps of every row
            return [budgets.state(row) for row in generated]


@eager  # the states are host-side Python: one graph break a compiled step
def _forced_tokens(stage: ReasoningBudget, ctx: DecodeContext) -> Tensor:
    forced = _forced(stage.params)
    ids = [forced[s.forced] if s.phase is Phase.FORCING else -1 for s in stage.states(ctx)]
    return torch.tensor(ids, dtype=torch.long, device=ctx.tokens.device)

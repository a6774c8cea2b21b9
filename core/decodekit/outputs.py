"""`RowOutput`: one row's output as its tokens arrive, under the rules every strategy shares (docs/concepts.md,
"The decode engine": a stop token, a stop string, a stage's `Chain.ended`, `max_new_tokens`). The engine holds one
per row; beam search copies them as its candidates branch."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from decodekit.results import FinishReason, TokenEvent, TokenLogprobs
from decodekit.text import TextTracker

__all__ = ["RowOutput"]


@dataclass(eq=False)
class RowOutput:
    """One row's generated tokens, text, logprobs and finish reason (see the module docstring)."""

    limit: int
    stop_tokens: frozenset[int]
    tracker: TextTracker | None
    ended: Callable[[Sequence[int]], str | None] | None = None  # a chain stage's verdict on the tokens so far
    # the tokenizer's end-of-text and special tokens: no text when one ends the row (vLLM's skip_special_tokens)
    textless: frozenset[int] = frozenset()
    tokens: list[int] = field(default_factory=list, init=False)
    texts: list[str] = field(default_factory=list, init=False)
    logprobs: list[TokenLogprobs] = field(default_factory=list, init=False)
    finish_reason: FinishReason | None = field(default=None, init=False)
    stopped_by: int | str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.limit == 0:
            self.finish_reason = "length"

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str | None:
        return None if self.tracker is None else "".join(self.texts)

    def push(self, token: int, logprobs: TokenLogprobs | None = None, row: int = 0) -> TokenEvent:
        """Add the row's next token (the row must not be done); its event names the row `row`."""
        self.tokens.append(token)
        if logprobs is not None:
            self.logprobs.append(logprobs)
        stopped_by: int | str | None = token if token in self.stop_tokens else None
        if stopped_by is None and self.ended is not None:
            stopped_by = self.ended(self.tokens)
        reason: FinishReason | None = "stop" if stopped_by is not None else None
        if reason is None and len(self.tokens) >= self.limit:
            reason = "length"
        text = None
        if self.tracker is not None:
            # The end of text or special token that ends a row has no text, nor has a stop token unless the text keeps
            # what ended it (include_stop_str_in_output: vLLM renders the stop token then).
            silent = token in self.textless or (isinstance(stopped_by, int) and not self.tracker.keep_stop)
            if stopped_by is not None and silent:
                text, hit = self.tracker.end()
            else:
                text, hit = self.tracker.push(token, final=reason is not None)
            if hit is not None:  # the stop token's text, or the text it let out, has a stop string: vLLM names it
                reason, stopped_by = "stop", hit
            self.texts.append(text)
        self.finish_reason, self.stopped_by = reason, stopped_by
        return TokenEvent(row, len(self.tokens) - 1, token, text, reason, logprobs, stopped_by)

    def copy(self) -> RowOutput:
        """An independent copy (a candidate branching off this row)."""
        twin = copy.copy(self)
        twin.tokens, twin.texts, twin.logprobs = list(self.tokens), list(self.texts), list(self.logprobs)
        twin.tracker = None if self.tracker is None else self.tracker.copy()
        return twin

"""Text of a generated row, decoded incrementally, and stop strings found across tokens."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from decodekit.prompts import Tokenizer

__all__ = ["TextTracker"]


class TextTracker:
    """Incremental text of one row: finds stop strings across token boundaries and holds back text that
    might start one, so streamed text never shows a stop string.

    Each step decodes only the tokens since the last settled point, with the tokens before them as left
    context (a tokenizer may render a token differently at the start of a text), so a step costs the same
    at token 10 and 10,000. Text ending in a split multi-byte character (U+FFFD) waits for the next token; at the
    end it comes out as U+FFFD, as decoding the tokens gives, except under `keep_stop` (vLLM's
    include_stop_str_in_output), where the text is vLLM's incremental detokenizer's, which never shows it.
    """

    _REPLACEMENT = "\ufffd"

    def __init__(self, tokenizer: Tokenizer, stop_strings: Sequence[str], keep_stop: bool = False) -> None:
        self.tokenizer = tokenizer
        self.stop_strings = list(stop_strings)  # non-empty: `decode_request` refuses ""
        self.keep_stop = keep_stop  # the text ends after the stop string hit, not before it
        self.tokens: list[int] = []
        self.prefix = 0  # tokens[prefix:read]: the left context of the next decode
        self.read = 0  # tokens[:read] are rendered in `text`
        self.text = ""
        self.emitted = 0

    def push(self, token: int, final: bool) -> tuple[str, str | None]:
        """Add a token; return (new text to show, the stop string hit or None)."""
        self.tokens.append(token)
        return self._settle(final)

    def _settle(self, final: bool) -> tuple[str, str | None]:
        """Render the tokens not yet in `text` (all of them when `final`) and look for the stop strings."""
        context = self.tokenizer.decode(self.tokens[self.prefix : self.read])
        window = self.tokenizer.decode(self.tokens[self.prefix :])
        if len(window) > len(context) and ((final and not self.keep_stop) or not window.endswith(self._REPLACEMENT)):
            self.text += window[len(context) :]
            self.prefix, self.read = self.read, len(self.tokens)
        for s in self.stop_strings:
            if (i := self.text.find(s, max(0, self.emitted - len(s) + 1))) >= 0:
                self.text = self.text[: i + len(s) * self.keep_stop]
                return self._emit(len(self.text)), s
        # nothing to hold back without stop strings, nor while one may start when a stop string kept is text
        if final or self.keep_stop or not self.stop_strings:
            return self._emit(len(self.text)), None
        # Shown text never ends in the start of a stop string (it was held back), so no start reaches past the text
        # not yet shown; checking every prefix of a request's 100,000-character stop string took 4 s over 20 tokens.
        unshown = len(self.text) - self.emitted
        hold = max(
            (k for s in self.stop_strings for k in range(1, min(len(s), unshown + 1)) if self.text.endswith(s[:k])),
            default=0,
        )
        return self._emit(len(self.text) - hold), None

    def copy(self) -> TextTracker:
        """An independent copy that shares the tokenizer (a beam branching off this row)."""
        twin = copy.copy(self)
        twin.tokens = list(self.tokens)
        return twin

    def end(self) -> tuple[str, str | None]:
        """End the text on a token outside it (a stop token): (the text held back for a stop string, and a
        character whose last bytes never came as U+FFFD, as `push` at the end; the stop string that text hit)."""
        return self._settle(final=True)

    def _emit(self, upto: int) -> str:
        upto = max(upto, self.emitted)
        delta, self.emitted = self.text[self.emitted : upto], upto
        return delta

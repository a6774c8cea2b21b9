"""`Matchers`: one grammar's parse states, keyed by the tokens that led to them.

A row's state is a function of its generated tokens alone, found here rather than kept per row: the
state of the longest prefix held is advanced over the rest (usually the row's last step left its parent,
so that is one token). Nothing advances on a guess, so nothing needs undoing: a speculative draft that is
rejected, a beam that is dropped or copied, a step redone, a new generation — each simply asks for the
tokens it has. Held states are a bounded LRU; one evicted is rebuilt from an ancestor, never wrong. It is small
(a few steps of every row): each state keeps llguidance's history of its whole text, so states x tokens is memory;
it doubles (to `MAX_HELD`) when a row's parent was evicted, as speculative drafts of many rows touch more prefixes
a round than it held.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from decodekit_grammar.bitmask import Words
from decodekit_grammar.engine import Matcher

__all__ = ["Ended", "Matchers", "key_of"]

_TOKEN = 4  # bytes per token in a key (int32)
MAX_HELD = 1024  # states held at most: each keeps llguidance's history of its text (memory)


def key_of(tokens: Any) -> bytes:
    """The key of a token sequence: its ids as int32 bytes (a list, or a row of an int32 array)."""
    return np.asarray(tokens, dtype=np.int32).tobytes()


class Matchers:
    """The states of one grammar's parse (see the module docstring); `capacity` states are held at least."""

    def __init__(self, root: Matcher, capacity: int = 64, ends: Callable[[Matcher], bool] | None = None) -> None:
        self.root = root
        self.capacity = capacity
        self._ends = ends  # whether a parse the grammar would go on from ends the text all the same
        self._held: OrderedDict[bytes, Matcher] = OrderedDict()

    def state(self, key: bytes) -> Matcher:
        """The parse after the tokens of `key` (`key_of`). A complete or failed parse stays so whatever follows
        (speculative drafts may run past a row's end; those tokens are never emitted)."""
        held = self._held
        found = held.get(key)
        if found is not None:
            held.move_to_end(key)
            return found
        n = len(key) // _TOKEN
        have = max(n - 1, 0)  # tokens of the longest prefix held
        while have > 0 and key[: have * _TOKEN] not in held:
            have -= 1
        if have < n - 1:  # the parent was evicted: fewer held than a step touches (speculative drafts, many rows)
            self.capacity = max(self.capacity, min(2 * self.capacity, MAX_HELD))
        state = held[key[: have * _TOKEN]] if have else self.root
        tokens = np.frombuffer(key, dtype=np.int32)
        for i in range(have, n):
            if not (state.complete or state.error):
                state = state.advance(int(tokens[i]))
                if self._ends is not None and not state.complete and self._ends(state):
                    state = Ended(state)
        self._hold(key, state)  # not every prefix rebuilt: those would evict other rows' states in turn
        return state

    def _hold(self, key: bytes, state: Matcher) -> None:
        self._held[key] = state
        while len(self._held) > self.capacity:
            self._held.popitem(last=False)

    def reserve(self, rows: int) -> None:
        """Hold at least a few steps of `rows` rows (a step asks for each row's state and its parent's)."""
        self.capacity = max(self.capacity, 8 * rows)

    def __len__(self) -> int:
        return len(self._held)


class Ended:
    """A parse that ends the text though its grammar would go on (`Matchers(ends=...)`): complete, as the engine's
    complete parses are, so a row ends on it and nothing it is given after (a speculative draft) advances it."""

    complete = True
    accepting = True
    error = False

    def __init__(self, parse: Matcher) -> None:
        self.parse = parse

    def advance(self, token: int) -> Matcher:
        return self

    def fill_mask(self, words: Words) -> None:
        self.parse.fill_mask(words)

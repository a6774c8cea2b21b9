"""What a grammar stage keeps per vocabulary: the engine's vocabulary (shared by every stage) and, per
grammar, its parse states; a grammar no token can begin is refused here, before any step."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from decodekit.errors import ParameterError
from decodekit_grammar.bitmask import any_token, empty
from decodekit_grammar.engine import Grammar, GrammarEngine, Matcher
from decodekit_grammar.matchers import Matchers
from decodekit_grammar.vocabulary import TokenTable

__all__ = ["Book"]

_VOCABULARIES: weakref.WeakKeyDictionary[TokenTable, dict[str, Any]] = weakref.WeakKeyDictionary()
_VOCABULARIES_LOCK = threading.Lock()


def _vocabulary(engine: GrammarEngine, table: TokenTable) -> Any:
    """The engine's vocabulary for `table`, made once and shared by every stage (a second at 50,000 tokens)."""
    with _VOCABULARIES_LOCK:
        by_engine = _VOCABULARIES.setdefault(table, {})
        if engine.name not in by_engine:
            by_engine[engine.name] = engine.vocabulary(table)
        return by_engine[engine.name]


class Book:
    """What a stage keeps for one vocabulary: the engine's vocabulary and, per grammar, its parse states."""

    def __init__(self, engine: GrammarEngine, table: TokenTable, grammars: Sequence[Grammar | None], stage: str):
        self.vocabulary = _vocabulary(engine, table)
        self.size = engine.mask_size(self.vocabulary)  # bits per mask
        self.tokens = table.size  # the bits that stand for the model's tokens
        self.open_end = not table.eos  # no end-of-sequence id: a complete row's mask is left open
        self.matchers: list[Matchers | None] = []
        for i, grammar in enumerate(grammars):
            if grammar is None:
                self.matchers.append(None)
                continue
            try:
                root = engine.start(grammar, self.vocabulary)
                _check_first_tokens(root, self.size, table)
            except ValueError as exc:
                which = f" (prompt {i})" if len(grammars) > 1 else ""
                raise ParameterError(f"{stage}: the grammar{which} cannot be used with this tokenizer: {exc}") from None
            self.matchers.append(Matchers(root, ends=self._stuck if self.open_end else None))

    def _stuck(self, state: Matcher) -> bool:
        """A match that only characters the vocabulary lacks could go on from: with no end token to choose
        instead, the text ends there (rather than at a step with no token left)."""
        if not state.accepting or state.error:
            return False
        words = empty(self.size)
        state.fill_mask(words)
        return not any_token(words, self.tokens)


def _check_first_tokens(root: Matcher, size: int, table: TokenTable) -> None:
    """Raise `ValueError` if no token of the model's may begin a text: every decode would find its first step
    empty (a `NumericsError` that cannot say why); the reason is known here, before any step."""
    words = empty(size)
    root.fill_mask(words)
    if any_token(words, table.size):
        return
    if root.accepting:  # the empty text only (or others the vocabulary cannot spell), and no end token
        raise ValueError(
            "the only text of it the tokenizer's tokens can spell is the empty one, and without an end-of-sequence "
            "token a row cannot end before its first token; allowed: a grammar with a text of at least one character"
        )
    raise ValueError(
        "no token of it can begin the text (the grammar needs a character the vocabulary lacks); allowed: a "
        "grammar whose text the tokenizer's tokens can spell"
    )

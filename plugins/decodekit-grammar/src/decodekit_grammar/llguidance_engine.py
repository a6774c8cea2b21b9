"""The llguidance engine (github.com/guidance-ai/llguidance): JSON Schema, regular expressions and Lark
grammars, a token mask computed in Rust from a trie of the vocabulary's bytes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import numpy as np

from decodekit_grammar.engine import Grammar
from decodekit_grammar.vocabulary import TokenTable

__all__ = ["LLGuidance"]

_QUIET = 0  # llguidance's log level: its warnings would print to stderr; a stage reports errors itself


def _grammar_text(grammar: Grammar) -> str:
    """llguidance's grammar JSON for `grammar`."""
    if grammar.kind == "json_schema":
        overrides: Any = {"whitespace_flexible": False} if grammar.compact else None
        return llguidance.LLMatcher.grammar_from_json_schema(grammar.source, overrides=overrides)
    if grammar.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(grammar.source)
    return llguidance.LLMatcher.grammar_from_lark(grammar.source)


class _Matcher:
    """An `llguidance.LLMatcher` that is never changed after `advance` made it (see `engine.Matcher`)."""

    __slots__ = ("_m", "accepting", "complete", "error")

    def __init__(self, m: llguidance.LLMatcher) -> None:
        self._m = m
        self.error = m.is_error()
        self.complete = m.is_stopped() and not self.error
        self.accepting = m.is_accepting()

    def advance(self, token: int) -> _Matcher:
        m = self._m.deep_copy()  # cheap: llguidance shares the parse's history between copies
        m.consume_token(token)
        return _Matcher(m)

    def fill_mask(self, words: np.ndarray[Any, np.dtype[np.int32]]) -> None:
        self._m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)


class _Wrapped:
    """What `llguidance.TokenizerWrapper` reads from a tokenizer: bytes per id, special and end ids, and a
    tokenize callable (llguidance's own helpers use it; masks do not)."""

    def __init__(self, tokens: Sequence[bytes], eos: int, special: list[int]) -> None:
        self.tokens = tokens
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids = special
        skip = set(special)
        self._index = {t: i for i, t in enumerate(tokens) if i not in skip}

    def __call__(self, text: str | bytes) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        out: list[int] = []
        at = 0
        while at < len(data):  # greedy: the longest token that starts here
            end = next((e for e in range(len(data), at, -1) if data[at:e] in self._index), None)
            if end is None:
                return out
            out.append(self._index[data[at:end]])
            at = end
        return out


@dataclass(frozen=True, eq=False)
class _Vocabulary:
    tokenizer: llguidance.LLTokenizer
    size: int  # ids a mask covers


class LLGuidance:
    """`engine.GrammarEngine` over llguidance."""

    name = "llguidance"

    def check(self, grammar: Grammar) -> str | None:
        if grammar.kind == "json_schema":
            try:
                json.loads(grammar.source)
            except ValueError as exc:
                return f"not JSON: {exc}"
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(_grammar_text(grammar))
        return messages[0].strip() if is_error else None

    def vocabulary(self, table: TokenTable) -> _Vocabulary:
        # Special tokens are written as llguidance spells them: 0xFF, then a name (no text ever matches it).
        tokens = [b"\xff[special %d]" % i if t is None else t for i, t in enumerate(table.tokens)]
        special = [i for i, t in enumerate(table.tokens) if t is None]
        eos: list[int] = list(table.eos)
        if not eos:  # no end-of-sequence token: one of llguidance's own, past the model's ids
            eos = [table.size]
            tokens.append(b"\xff[eos]")
            special.append(table.size)
        wrapped = llguidance.TokenizerWrapper(_Wrapped(tokens, eos[0], special))
        return _Vocabulary(llguidance.LLTokenizer(wrapped, n_vocab=len(tokens), eos_token=eos), len(tokens))

    def start(self, grammar: Grammar, vocabulary: Any) -> _Matcher:
        m = llguidance.LLMatcher(vocabulary.tokenizer, _grammar_text(grammar), log_level=_QUIET)
        if m.is_error():
            raise ValueError(m.get_error())
        return _Matcher(m)

    def mask_size(self, vocabulary: Any) -> int:
        return int(vocabulary.size)

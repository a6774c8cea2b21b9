"""The llguidance engine (github.com/guidance-ai/llguidance): JSON Schema, regular expressions and Lark
grammars, a token mask computed in Rust from a trie of the vocabulary's bytes."""

from __future__ import annotations

import functools
import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

from decodekit_grammar.bitmask import Words, empty
from decodekit_grammar.engine import Grammar
from decodekit_grammar.vocabulary import TokenTable

__all__ = ["LLGuidance"]

# llguidance pushes the bytes a grammar forces into its parse before a mask, and 1.9 does so without end where its
# lexer forces a byte forever (`x x` with `x: /a+/`: greedy, the first x takes every "a"), under no limit of its own.
# A Lark grammar's masks are computed without that forcing: the forced bytes' tokens are allowed by the trie walk.
_NO_FORCING = '\n%llguidance {"no_forcing": true}\n'
_QUIET = 0  # llguidance's log level: its warnings would print to stderr; a stage reports errors itself


def _grammar_text(grammar: Grammar) -> str:
    """llguidance's grammar JSON for `grammar`."""
    if grammar.kind == "json_schema":
        overrides: Any = {"whitespace_flexible": False} if grammar.compact else None
        return llguidance.LLMatcher.grammar_from_json_schema(grammar.source, overrides=overrides)
    if grammar.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(grammar.source)
    lark = _lark_of_gbnf(grammar.source) if grammar.kind == "gbnf" else grammar.source
    return llguidance.LLMatcher.grammar_from_lark(lark + _NO_FORCING)


def _lark_of_gbnf(text: str) -> str:
    """The Lark grammar llguidance's own converter makes of a GBNF one (`root` becomes `start`)."""
    try:
        return gbnf_to_lark(text)
    except Exception as exc:  # the converter raises bare Exceptions ("Rule 'x' not found"), and an IndexError or two
        raise ValueError(f"not GBNF that llguidance's converter reads: {exc}") from None


class _Matcher:
    """An `llguidance.LLMatcher` that is never changed after `advance` made it (see `engine.Matcher`)."""

    __slots__ = ("_m", "_size", "accepting", "complete", "error")

    def __init__(self, m: llguidance.LLMatcher, size: int) -> None:
        self._m = m
        self._size = size  # ids a mask covers
        self.error = m.is_error()
        self.complete = m.is_stopped() and not self.error
        self.accepting = m.is_accepting()

    def advance(self, token: int) -> _Matcher:
        m = self._m.deep_copy()  # cheap: llguidance shares the parse's history between copies
        if not m.consume_token(token) and self._allows(token):  # a token it allowed: llguidance gave up
            raise ValueError(_gave_up(m))
        return _Matcher(m, self._size)

    def _allows(self, token: int) -> bool:
        """Whether the mask here keeps `token` (asked only when consuming it failed: a rare path), on a copy."""
        words = empty(self._size)
        self._m.deep_copy().unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        return bool(words[token // 32] >> (token % 32) & 1)

    def fill_mask(self, words: Words) -> None:
        self._m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        if self._m.is_error():  # no token was consumed: llguidance gave up on the grammar here
            raise ValueError(_gave_up(self._m))


def _gave_up(m: llguidance.LLMatcher) -> str:
    """Why llguidance gave up on a parse that no token of the grammar's own had failed."""
    error = m.get_error().strip()
    if error.startswith("NoExtensionBias"):  # nothing at all may follow, not even a byte, and no end
        return "nothing can follow, and the text cannot end here (a rule that never ends)"
    return f"{error.splitlines()[0]} (a limit of llguidance's lexer or parser)"


# Rust's regex-syntax draws the pattern and carets over lines before its one-line reason: the reason is kept.
_REGEX_DRAWING = re.compile(r"regex parse error:\n.*?^error: ", re.S | re.M)
_ONE_OF = "oneOf constraints are not supported"  # llguidance names an option of its own a stage does not offer
_LARK_PLACE = re.compile(r"^at \d+\(\d+\): | \(in regex\)")  # a regex's place in the Lark rule it is wrapped in
_UNKNOWN_FORMAT = "Unknown format: "
_UNIMPLEMENTED = "Unimplemented keys: "
_GBNF_RULE = re.compile(r"^\s*[\w-]+\s*::=", re.M)  # llama.cpp's `root ::= ...`, which Lark's parser cannot read
# JSON Schema 2020-12's formats (section 7.3), which llguidance takes some of: it is asked which (`_known_formats`).
_FORMATS = (
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
    "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer", "relative-json-pointer",
    "regex",
)  # fmt: skip


@functools.cache
def _known_formats() -> tuple[str, ...]:
    """The formats of `_FORMATS` this llguidance builds a grammar for (it refuses the others as unknown)."""
    texts = (llguidance.LLMatcher.grammar_from_json_schema(json.dumps({"format": f})) for f in _FORMATS)
    return tuple(f for f, t in zip(_FORMATS, texts) if not llguidance.LLMatcher.validate_grammar(t))


def _message(grammar: Grammar, message: str) -> str:
    """llguidance's reason for refusing `grammar`, in the user's terms: one line for a regex (not the Lark rule
    llguidance wraps it in), a regex error's reason without its drawing, oneOf's limit without llguidance's option,
    and for a keyword or format it lacks, what to write instead."""
    message = _REGEX_DRAWING.sub("regex parse error: ", message.strip())
    if message.startswith(_ONE_OF):
        return (
            "oneOf whose branches a value may satisfy together is not supported; allowed: anyOf, or oneOf of "
            "branches no value satisfies together (of different types, say)"
        )
    if grammar.kind == "regex":
        return _LARK_PLACE.sub("", message.splitlines()[0])
    if grammar.kind == "lark" and _GBNF_RULE.search(grammar.source):
        return (
            f"{message}; this reads as GBNF (llama.cpp's `root ::= ...`); allowed: a Lark grammar (rule `start`), "
            "or this one as gbnf= (grammar(gbnf=...); the command line reads a .gbnf file as GBNF)"
        )
    if message.startswith(_UNIMPLEMENTED):
        return (
            f"{message}; allowed: a schema without them (llguidance implements none of them, and ignores none: "
            "check what they say after decoding)"
        )
    if message.startswith(_UNKNOWN_FORMAT):  # pydantic writes some ("password", "binary"): say what is taken
        return (
            f"{message}; allowed formats: {', '.join(_known_formats())} (JSON Schema's others are refused); "
            "drop the format, or state the text with a pattern"
        )
    return message


class _Wrapped:
    """What `llguidance.TokenizerWrapper` reads from a tokenizer: bytes per id, special and end ids, and a
    tokenize callable. llguidance tokenizes the bytes a grammar forces while it computes a mask (not to
    decide the mask); llguidance's own greedy tokenizer, in Rust, serves once the vocabulary is built. It is
    reached through a weak reference: the LLTokenizer holds this object, which must not hold it back."""

    def __init__(self, tokens: Sequence[bytes], eos: int, special: list[int]) -> None:
        self.tokens = tokens
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids = special
        self.owner: weakref.ref[_Vocabulary] | None = None

    def __call__(self, text: bytes) -> list[int]:
        owner = None if self.owner is None else self.owner()
        if owner is None:  # TokenizerWrapper's probe, before the vocabulary exists
            return []
        return list(owner.tokenizer.greedy_tokenize(text.decode("utf-8", errors="replace")))


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
                schema = json.loads(grammar.source)
            except RecursionError as exc:  # deeper than Python's json reads
                return f"nested too deeply: {exc}; allowed: a schema nested less deeply (llguidance reads ~128 levels)"
            except ValueError as exc:
                return f"not JSON: {exc}"
            if not isinstance(schema, dict):  # llguidance takes none but an object (a stage gives `true` as `{}`)
                return f"{grammar.source.strip()[:40]} is not a JSON object; allowed: a JSON Schema object, or true"
        try:  # llguidance refuses some grammars here already (a NaN in a schema), with a ValueError
            text = _grammar_text(grammar)
        except ValueError as exc:
            return _message(grammar, str(exc))
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text)
        return _message(grammar, messages[0]) if is_error else None

    def vocabulary(self, table: TokenTable) -> _Vocabulary:
        # Special tokens are written as llguidance spells them: 0xFF, then a name (no text ever matches it).
        tokens = [b"\xff[special %d]" % i if t is None else t for i, t in enumerate(table.tokens)]
        special = [i for i, t in enumerate(table.tokens) if t is None]
        eos: list[int] = list(table.eos)
        if not eos:  # no end-of-sequence token: one of llguidance's own, past the model's ids
            eos = [table.size]
            tokens.append(b"\xff[eos]")
            special.append(table.size)
        # llguidance assumes every byte has a token: it tokenizes the bytes a grammar forces, drops one it
        # cannot spell, and would allow the token after it ("ab" under `a<b` for a vocabulary without "<").
        # Each missing byte gets a token of its own past the model's ids, which the mask allows and a stage
        # never keeps: the row is left no token instead of a wrong one.
        spelled = {t[0] for t in tokens if len(t) == 1}
        tokens += [bytes([b]) for b in range(256) if b not in spelled]
        wrapped = _Wrapped(tokens, eos[0], special)
        tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(wrapped), n_vocab=len(tokens), eos_token=eos)
        vocabulary = _Vocabulary(tokenizer, len(tokens))
        wrapped.owner = weakref.ref(vocabulary)
        return vocabulary

    def start(self, grammar: Grammar, vocabulary: Any) -> _Matcher:
        m = llguidance.LLMatcher(vocabulary.tokenizer, _grammar_text(grammar), log_level=_QUIET)
        if m.is_error():
            raise ValueError(m.get_error())
        return _Matcher(m, vocabulary.size)

    def mask_size(self, vocabulary: Any) -> int:
        return int(vocabulary.size)

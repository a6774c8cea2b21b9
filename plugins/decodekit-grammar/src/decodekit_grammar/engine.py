"""The grammar engine interface: what the stages ask of the library that parses.

llguidance implements it (`llguidance_engine`); another engine (xgrammar, outlines-core) is a plugin
that implements these three things and registers the stages with it (`GrammarStage.engine`). Masks
are bitmasks in the layout both of those use: bit `t % 32` of int32 word `t // 32` is set when token
`t` may come next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from decodekit_grammar.bitmask import Words
from decodekit_grammar.vocabulary import TokenTable

__all__ = ["Grammar", "GrammarEngine", "Matcher"]


@dataclass(frozen=True)
class Grammar:
    """A grammar as a stage's parameters give it: `kind` and its source text.

    json_schema: the schema's JSON text; `compact` forbids whitespace between JSON tokens.
    regex: a regular expression the whole text matches. lark: a Lark grammar whose rule is `start`.
    gbnf: a GBNF grammar (llama.cpp's) whose rule is `root`.
    """

    kind: Literal["json_schema", "regex", "lark", "gbnf"]
    source: str
    compact: bool = False


class Matcher(Protocol):
    """A grammar's parse after some tokens. Never changed once made: `advance` returns a new one, so a
    matcher can be shared by every row (and beam, and drafted position) whose tokens led to it."""

    @property
    def complete(self) -> bool:
        """No token can follow but an end-of-sequence one: the text is a whole sentence of the grammar."""

    @property
    def accepting(self) -> bool:
        """The text so far is a sentence of the grammar (more may follow, unless complete)."""

    @property
    def error(self) -> bool:
        """A token the grammar does not allow was consumed (no token can follow)."""

    def advance(self, token: int) -> Matcher:
        """The parse after one more token (in `error` if the grammar forbids it); raises `ValueError` with the
        reason if the engine gives up on a token the grammar allows (a limit of its own)."""

    def fill_mask(self, words: Words) -> None:
        """Write the tokens that may follow into `words` (int32, `(size + 31) // 32` of them for a vocabulary
        of `size` ids, end-of-sequence ids included); raises `ValueError` with the reason if the engine gives up
        on the grammar here (a limit of its own, a rule that can never end)."""


class GrammarEngine(Protocol):
    """Compiles grammars and starts their matchers over a vocabulary."""

    name: str

    def check(self, grammar: Grammar) -> str | None:
        """The engine's message if `grammar` is invalid, else None (no tokenizer needed: the stage's
        construction calls it)."""

    def vocabulary(self, table: TokenTable) -> Any:
        """The engine's form of a tokenizer's token table (made once per table; may take a second for a large
        vocabulary). Its end-of-sequence ids are `table.eos`, or, when there are none, one of its own past
        `table.size`; it may add ids of its own past those too (llguidance: one per byte no token spells), so a mask
        may have more than `table.size` bits, and a stage reads only the first `table.size`."""

    def start(self, grammar: Grammar, vocabulary: Any) -> Matcher:
        """The matcher before any token; raises `ValueError` with the engine's message if the grammar cannot
        be used with this vocabulary."""

    def mask_size(self, vocabulary: Any) -> int:
        """The number of ids a mask covers (`table.size`, or more with ids of the engine's own)."""

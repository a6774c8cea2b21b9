"""What a grammar needs of a tokenizer: the bytes each token id stands for, and which ids end a text.

A tokenizer takes part by stating its tokens' bytes (the protocol `ByteTokenizer`):

    token_bytes() -> Sequence[bytes | None]   # id -> the bytes it decodes to; None: a special token (no text)
    eos_token_ids: Sequence[int]              # optional: the ids that end a text

`CharTokenizer` (tiny-shakespeare) and `HFTokenizer` (a Hugging Face fast tokenizer: byte-level BPE, or
one that spells its tokens as text) implement it. A model without a tokenizer, or a tokenizer without
`token_bytes`, is refused with the reason.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from decodekit.errors import DecodekitError, ParameterError
from decodekit.prompts import tokenizer_ids

__all__ = ["ByteTokenizer", "TokenTable", "check_tokenizer", "token_table"]


@runtime_checkable
class ByteTokenizer(Protocol):
    """A tokenizer that can state its tokens' bytes (see the module docstring)."""

    def token_bytes(self) -> Sequence[bytes | None]: ...


@dataclass(frozen=True, eq=False)
class TokenTable:
    """A model's vocabulary as bytes: `tokens[i]` is id i's bytes (None: special, never part of a text) for
    every id the model scores, and `eos` the ids among them that end a text (possibly none)."""

    tokens: tuple[bytes | None, ...]
    eos: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.tokens)


_TABLES: weakref.WeakKeyDictionary[object, dict[int | None, TokenTable]] = weakref.WeakKeyDictionary()


def token_table(tokenizer: object, vocab_size: int | None, stage: str) -> TokenTable:
    """`tokenizer`'s table for a model with `vocab_size` logits (None: as many as the tokenizer states), made once
    per tokenizer and size; a `ParameterError` naming `stage` says why a tokenizer cannot serve."""
    try:
        cached = _TABLES.get(tokenizer, {}).get(vocab_size)
    except TypeError:  # not weakly referenceable: built every time
        cached = None
    if cached is not None:
        return cached
    table = _table(tokenizer, vocab_size, stage)
    with contextlib.suppress(TypeError):  # not weakly referenceable: not kept
        tables = _TABLES.setdefault(tokenizer, {})
        if vocab_size is None:  # the tokenizer's own size: one table with a model of as many ids, whichever came first
            table = tables.setdefault(table.size, table)
        tables[vocab_size] = table
    return table


def check_tokenizer(tokenizer: object, stage: str) -> None:
    """Refuse, naming `stage`, a tokenizer that cannot state its tokens' bytes (or none)."""
    if tokenizer is None:
        raise ParameterError(
            f"{stage}: the model has no tokenizer; a grammar constrains text, so it needs a tokenizer that "
            "states its tokens' bytes (token_bytes())"
        )
    if not isinstance(tokenizer, ByteTokenizer):
        raise ParameterError(
            f"{stage}: tokenizer {type(tokenizer).__name__} cannot state its tokens' bytes (it has no token_bytes()); "
            "allowed: a tokenizer with token_bytes() -> the bytes of each id, None for a special token "
            "(CharTokenizer, HFTokenizer)"
        )


def _table(tokenizer: object, vocab_size: int | None, stage: str) -> TokenTable:
    check_tokenizer(tokenizer, stage)
    assert isinstance(tokenizer, ByteTokenizer)
    try:
        tokens = list(tokenizer.token_bytes())
    except DecodekitError as exc:
        raise ParameterError(f"{stage}: {exc}") from None
    vocab_size = len(tokens) if vocab_size is None else vocab_size
    if len(tokens) > vocab_size:
        raise ParameterError(
            f"{stage}: tokenizer {type(tokenizer).__name__} states {len(tokens)} tokens for a model of "
            f"{vocab_size}; allowed: at most the model's vocabulary"
        )
    bad = next((i for i, t in enumerate(tokens) if t is not None and not isinstance(t, bytes)), None)
    if bad is not None:
        raise ParameterError(
            f"{stage}: tokenizer {type(tokenizer).__name__}.token_bytes() gives {tokens[bad]!r} for id {bad}; "
            "allowed: bytes, or None for a special token"
        )
    tokens += [None] * (vocab_size - len(tokens))  # ids the model scores beyond the tokenizer's: never text
    eos = tuple(i for i in tokenizer_ids(tokenizer, "eos_token_ids") if 0 <= i < vocab_size)
    return TokenTable(tuple(tokens), eos)

"""A character-level tokenizer: one id per character of a fixed alphabet."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from decodekit.errors import ParameterError

__all__ = ["REPLACEMENT_CHAR", "CharTokenizer", "UnknownCharacterError"]

#: What `encode(..., errors="replace")` substitutes for a character outside the alphabet.
REPLACEMENT_CHAR = " "


class UnknownCharacterError(ParameterError):
    """`encode` met characters outside the tokenizer's alphabet (a `ParameterError`, so a `ValueError`)."""


class CharTokenizer:
    """Maps each character of `alphabet` to its index; `alphabet` is a string of distinct characters.

    Build the one the shipped model uses with `CharTokenizer.from_text(corpus)`: the sorted set
    of the corpus' characters (84 for the Shakespeare corpus). There are no special tokens, so
    `vocab_size == len(alphabet)`.
    """

    def __init__(self, alphabet: str) -> None:
        if not alphabet:
            raise ParameterError("CharTokenizer: alphabet is empty; allowed: a non-empty string")
        if len(set(alphabet)) != len(alphabet):
            raise ParameterError("CharTokenizer: alphabet has repeated characters; allowed: distinct ones")
        self._alphabet = alphabet
        self._index = {ch: i for i, ch in enumerate(alphabet)}

    @classmethod
    def from_text(cls, text: str | Iterable[str]) -> CharTokenizer:
        """The tokenizer whose alphabet is the sorted set of characters in `text`."""
        chars: set[str] = set()
        if isinstance(text, str):
            chars.update(text)
        else:
            for chunk in text:
                chars.update(chunk)
        return cls("".join(sorted(chars)))

    @property
    def alphabet(self) -> str:
        return self._alphabet

    @property
    def vocab_size(self) -> int:
        return len(self._alphabet)

    def encode(self, text: str, errors: Literal["strict", "replace"] = "strict") -> list[int]:
        """Token ids of `text`, one per character.

        `errors="strict"` (the default) raises `UnknownCharacterError` naming every character
        outside the alphabet and its first position; `errors="replace"` maps them to
        `REPLACEMENT_CHAR` (a space) instead.
        """
        index = self._index
        try:
            return [index[ch] for ch in text]
        except KeyError:
            pass
        if errors == "replace":
            fill = index.get(REPLACEMENT_CHAR, 0)
            return [index.get(ch, fill) for ch in text]
        if errors != "strict":
            raise ParameterError(f"CharTokenizer.encode: errors={errors!r} is invalid; allowed: 'strict', 'replace'")
        first: dict[str, int] = {}
        for pos, ch in enumerate(text):
            if ch not in index and ch not in first:
                first[ch] = pos
        shown = ", ".join(f"{ch!r} (U+{ord(ch):04X}) at position {pos}" for ch, pos in list(first.items())[:10])
        more = f" and {len(first) - 10} more" if len(first) > 10 else ""
        raise UnknownCharacterError(
            f"CharTokenizer.encode: {len(first)} character(s) not in the alphabet: {shown}{more}; "
            f"allowed: the {self.vocab_size} characters {self._alphabet!r} "
            f"(or pass errors='replace' to map unknown characters to {REPLACEMENT_CHAR!r})"
        )

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`; every id must be in `range(vocab_size)`."""
        alphabet = self._alphabet
        n = len(alphabet)
        out = []
        for pos, i in enumerate(ids):
            i = int(i)
            if not 0 <= i < n:
                raise ParameterError(f"CharTokenizer.decode: id {i} at position {pos} is invalid; allowed: 0..{n - 1}")
            out.append(alphabet[i])
        return "".join(out)

    def token_bytes(self) -> list[bytes]:
        """Each id's bytes (its character in UTF-8), for a grammar that works on bytes (`decodekit_grammar`)."""
        return [ch.encode("utf-8") for ch in self._alphabet]

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"

"""A tokenizer of single characters that states its bytes, as a grammar stage reads a tokenizer (tests only)."""

from __future__ import annotations

from collections.abc import Sequence


class Chars:
    """id 0 is the end of text (no bytes); ids 1.. are the characters of `alphabet`."""

    eos_token_ids: tuple[int, ...] = (0,)

    def __init__(self, alphabet: str) -> None:
        self.alphabet = alphabet

    def encode(self, text: str) -> list[int]:
        return [self.alphabet.index(c) + 1 for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.alphabet[i - 1] if i else "<eos>" for i in ids)

    def token_bytes(self) -> list[bytes | None]:
        return [None, *(c.encode() for c in self.alphabet)]

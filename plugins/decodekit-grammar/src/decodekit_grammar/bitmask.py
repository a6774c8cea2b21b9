"""Token bitmasks, in the engines' layout: int32 words, token t allowed where bit t % 32 of word t // 32 is set."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Words", "any_token", "caps", "empty"]

Words = np.ndarray[Any, np.dtype[np.int32]]

# Byte -> the 8 caps of its bits, low bit first: +inf where a bit is set (the token kept), -inf where not.
_BYTE_CAPS = np.where((np.arange(256)[:, None] >> np.arange(8)) & 1, np.inf, -np.inf).astype(np.float32)


def empty(bits: int, *rows: int) -> Words:
    """Masks `[*rows, W]` of at least `bits` bits, allowing nothing."""
    return np.zeros((*rows, (bits + 31) // 32), dtype=np.int32)


def any_token(words: Words, tokens: int) -> bool:
    """Whether a mask allows any of the model's `tokens` (an engine's mask may have bits past them)."""
    whole = tokens // 32  # words of the model's tokens only: read as they are, the rest bit by bit
    if words[:whole].any():
        return True
    return bool(np.unpackbits(words[whole:].view(np.uint8), count=tokens - 32 * whole, bitorder="little").any())


def caps(words: Words, vocab_size: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """`[B, V]` float32: +inf where the bitmask allows the token, -inf where not, by a table of bytes."""
    table = np.take(_BYTE_CAPS, words.view(np.uint8), axis=0)  # [B, 4W, 8]
    return table.reshape(words.shape[0], -1)[:, :vocab_size]

"""Which tokens leave a UTF-8 character unfinished, judged as llama.cpp judges a token before it forces a reasoning
block's end (`common_utf8_is_complete` on that token's own piece), from the tokenizer's `token_bytes()`."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from decodekit.errors import DecodekitError

__all__ = ["ends_a_character", "unfinished_ids"]

_UNFINISHED: weakref.WeakKeyDictionary[object, frozenset[int]] = weakref.WeakKeyDictionary()


def ends_a_character(piece: bytes) -> bool:
    """llama.cpp's `common_utf8_is_complete`: the last lead byte within `piece`'s last 4 bytes has all the
    continuation bytes its character needs. Empty: yes; continuation bytes alone (a character's tail): no."""
    tail = piece[-4:]
    for back, byte in enumerate(reversed(tail), 1):
        if byte & 0xC0 != 0x80:  # not a continuation byte: it says how long its character is
            return back >= (4 if byte >= 0xF0 else 3 if byte >= 0xE0 else 2 if byte >= 0xC0 else 1)
    return not tail


def unfinished_ids(tokenizer: object) -> frozenset[int]:
    """The ids whose bytes do not end a whole character, read once per tokenizer; none for a tokenizer that cannot
    state its tokens' bytes (ids only)."""
    if not callable(getattr(tokenizer, "token_bytes", None)):  # no tokenizer, or one without bytes
        return frozenset()
    try:
        unfinished = _UNFINISHED.get(tokenizer)
    except TypeError:  # not weakly referenceable: read every time
        unfinished = None
    if unfinished is None:
        unfinished = _read(tokenizer)
        with contextlib.suppress(TypeError):
            _UNFINISHED[tokenizer] = unfinished
    return unfinished


def _read(tokenizer: Any) -> frozenset[int]:
    try:
        pieces = tokenizer.token_bytes()
    except DecodekitError:  # HFTokenizer's refusal of a decoder that does not spell each token alone (WordPiece's)
        return frozenset()
    # None: a special token, no text (llama.cpp's piece without specials is empty: complete)
    return frozenset(i for i, piece in enumerate(pieces) if isinstance(piece, bytes) and not ends_a_character(piece))

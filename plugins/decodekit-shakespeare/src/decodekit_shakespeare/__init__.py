"""decodekit-shakespeare: the `tiny-shakespeare` demo model, a character-level GPT.

Importing this package is light; torch loads with `decodekit_shakespeare.model`.
"""

from __future__ import annotations

from decodekit_shakespeare.tokenizer import REPLACEMENT_CHAR, CharTokenizer, UnknownCharacterError

__all__ = ["REPLACEMENT_CHAR", "CharTokenizer", "UnknownCharacterError", "__version__"]

__version__ = "0.1.0"

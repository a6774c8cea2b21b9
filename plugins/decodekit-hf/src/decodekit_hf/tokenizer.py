"""`HFTokenizer`: a transformers tokenizer behind decodekit's `encode`/`decode` protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["HFTokenizer", "eos_token_ids"]


class HFTokenizer:
    """`encode(text) -> ids` and `decode(ids) -> text` with the tokenizer's own defaults.

    `encode` adds the special tokens the tokenizer adds by default (a Llama tokenizer's BOS,
    nothing for GPT-2), as `tokenizer(text)` does; `decode` keeps special tokens.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.hf.encode(text)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.hf.decode(list(ids)))


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def eos_token_ids(model: Any, tokenizer: Any, vocab_size: int) -> tuple[int, ...]:
    """The end-of-sequence ids: the generation config's, else the model config's, else the tokenizer's.

    Ids outside the vocabulary (a random-init config keeps GPT-2's 50256 with a small vocab) are dropped.
    """
    sources = (
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
        getattr(getattr(model, "config", None), "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
    )
    for source in sources:
        ids = [i for i in _as_ids(source) if 0 <= i < vocab_size]
        if ids:
            return tuple(dict.fromkeys(ids))
    return ()

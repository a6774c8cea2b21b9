"""Tiny random-init reference GPTs (MHA, GQA, MQA) and a character tokenizer for tests."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from decodekit.models.gpt import GPT, GPTConfig


class CharTokenizer:
    """Bytes 32..126 as ids 0..94 (enough for tests that need text)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) - 32 for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i + 32) for i in ids)


def tiny_gpt(n_kv_head: int | None = None, *, vocab_size: int = 101, block_size: int = 64, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=vocab_size, block_size=block_size, n_layer=2, n_head=4, n_kv_head=n_kv_head, n_embd=32
    )
    return GPT(config).eval()

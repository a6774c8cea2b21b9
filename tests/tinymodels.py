"""Tiny random-init reference GPTs (MHA, GQA, MQA), a character tokenizer and a stateful stage for tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from decodekit_gpt.gpt import GPT, GPTConfig

from decodekit.context import DecodeContext
from decodekit.params import NoParams
from decodekit.stage import ProcessorBase


class CharTokenizer:
    """Bytes 32..126 as ids 0..94 (enough for tests that need text)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) - 32 for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i + 32) for i in ids)


class Counting(ProcessorBase[NoParams]):
    """A processor with per-generation state: how many times it ran (`ctx.state_for(stage) == [calls]`)."""

    name = "counting"

    def init_state(self, ctx: DecodeContext) -> list[int]:
        return [0]

    def __call__(self, logits: torch.Tensor, ctx: DecodeContext) -> torch.Tensor:
        ctx.state_for(self)[0] += 1
        return logits


def tiny_gpt(
    n_kv_head: int | None = None, *, vocab_size: int = 101, block_size: int = 64, seed: int = 0, n_layer: int = 2
) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=4, n_kv_head=n_kv_head, n_embd=32
    )
    return GPT(config).eval()


def left_padded(prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask)` for transformers' `model.generate`: rows left-padded with id 0, masked."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p) :] = torch.tensor(p)
        mask[b, width - len(p) :] = 1
    return ids, mask


def greedy_generation_config(**overrides: Any) -> Any:
    """A transformers `GenerationConfig` with every default that could differ from decodekit's loop
    made explicit: greedy, no EOS stop, no minimum length, no processors beyond `overrides`."""
    from transformers import GenerationConfig

    base: dict[str, Any] = dict(
        do_sample=False,
        max_new_tokens=64,
        min_length=0,
        min_new_tokens=None,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
        temperature=None,
        top_k=None,
        top_p=None,
        repetition_penalty=None,
        num_beams=1,
        use_cache=True,
    )
    return GenerationConfig(**(base | overrides))  # type: ignore[no-untyped-call]

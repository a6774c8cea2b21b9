"""The scored caches' tests share one small rotary GPT (grouped-query attention, 32 positions)."""

from __future__ import annotations

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=29, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    return GPT(config).eval()

"""Rotary positions in the reference GPT: a second implementation, relative-only attention, caches."""

from __future__ import annotations

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig, apply_rope, rope_angles

import decodekit as dk
from decodekit.errors import ParameterError


def rope_gpt(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=40, block_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    return GPT(config).eval()


def test_rope_matches_transformers_rotary_embedding() -> None:
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    torch.manual_seed(1)
    q, k = torch.randn(2, 4, 7, 16), torch.randn(2, 2, 7, 16)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [3, 4, 5, 6, 7, 8, 9]])
    cos, sin = rope_angles(positions, 16, 10000.0)  # [B, 1, T, D]
    want_q, want_k = llama.apply_rotary_pos_emb(q, k, cos.squeeze(1), sin.squeeze(1))
    torch.testing.assert_close(apply_rope(q, cos, sin), want_q)
    torch.testing.assert_close(apply_rope(k, cos, sin), want_k)


def test_rope_logits_depend_only_on_relative_positions() -> None:
    model = rope_gpt()
    ids = torch.randint(0, 40, (1, 12))
    at_zero = model(ids, torch.arange(12)[None])
    shifted = model(ids, torch.arange(12)[None] + 37)
    torch.testing.assert_close(at_zero, shifted, atol=1e-5, rtol=1e-5)
    assert model.wpe is None and "wpe.weight" not in model.state_dict()


def test_rope_cached_equals_uncached_on_ragged_prompts() -> None:
    model = rope_gpt()
    chain = dk.Chain([], selector=dk.create("greedy"))
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9]]
    want = dk.generate(model, prompts, chain=chain, max_new_tokens=12, cache="none").tokens
    for cache in ("dense", "gqa"):
        assert dk.generate(model, prompts, chain=chain, max_new_tokens=12, cache=cache).tokens == want


def test_rope_config_is_checked() -> None:
    with pytest.raises(ParameterError, match="position='alibi'"):
        GPTConfig(position="alibi")  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="head_dim=3"):
        GPTConfig(n_head=2, n_embd=6, position="rope")

"""Rotary positions in the reference GPT: a second implementation, relative-only attention, caches."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig, apply_rope, rope_angles

import decodekit as dk
from decodekit.errors import ParameterError
from decodekit.rope import rotate


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


def test_rotate_turns_the_first_dims_by_the_frequencies_and_passes_the_rest() -> None:
    """A partial rotary embedding's move, by hand in float64: pair `(x_i, x_{i+n})` of the first `2n` dims turns by
    `delta · inv_freq[i]`, the other dims pass (before: `rotate` took a base and turned the whole head)."""
    inv_freq = torch.tensor([1.0, 0.3, 0.05], dtype=torch.float64)  # n = 3 pairs of a head of 10
    x = torch.randn(1, 1, 2, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    deltas = [7, 123_456]
    got = rotate(x, torch.tensor(deltas), inv_freq)
    want = x.clone()
    for t, delta in enumerate(deltas):
        for i, f in enumerate(inv_freq.tolist()):
            a, b = x[0, 0, t, i].item(), x[0, 0, t, i + 3].item()
            c, s = math.cos(delta * f), math.sin(delta * f)
            want[0, 0, t, i], want[0, 0, t, i + 3] = a * c - b * s, b * c + a * s
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    torch.testing.assert_close(got[..., 6:], x[..., 6:], atol=0, rtol=0)


def test_a_cache_spec_gives_each_layers_frequencies() -> None:
    """`CacheSpec.frequencies`: a layer's own (`rope_frequencies`), else `rope_base`'s default ones, else None."""
    shape: dict[str, Any] = dict(n_layers=2, n_heads=2, n_kv_heads=2, head_dim=8)
    model = dk.ModelSpec(**shape, vocab_size=10, max_positions=16, rope_frequencies=((1.0, 0.5), (0.25, 0.0, 0.0, 0.0)))
    spec = dk.CacheSpec.for_model(model, batch_size=1, capacity=4)
    assert model.movable_keys and spec.movable_keys
    assert [spec.frequencies(layer).tolist() for layer in (0, 1)] == [[1.0, 0.5], [0.25, 0.0, 0.0, 0.0]]  # type: ignore[union-attr]
    default = dk.CacheSpec(**shape, batch_size=1, capacity=4, rope_base=100.0)
    assert default.frequencies(1).tolist() == [100.0 ** (-i / 8) for i in (0, 2, 4, 6)]  # type: ignore[union-attr]
    learned = dk.CacheSpec(**shape, batch_size=1, capacity=4)
    assert learned.frequencies(0) is None and not learned.movable_keys


@pytest.mark.parametrize(
    "freqs", [((1.0,),), ((1.0,) * 5, (1.0,)), ((1.0,), (-1.0,)), ((1.0,), (1,)), [(1.0,), (1.0,)]]
)
def test_rope_frequencies_are_checked(freqs: object) -> None:
    with pytest.raises(
        ParameterError, match=r"CacheSpec: rope_frequencies=.* is invalid; allowed: None \(rope_base's\) "
    ):
        dk.CacheSpec(n_layers=2, n_heads=2, n_kv_heads=2, head_dim=8, batch_size=1, capacity=4, rope_frequencies=freqs)  # type: ignore[arg-type]

"""A ragged batch through `window` decodes each row exactly as that row alone: the row's own sinks (its first real
tokens, not the batch's first slots, which are its padding), moved by the row's own distance, through eviction,
blocks longer than the slack, crop, reorder (beam search), speculative decoding, per-layer sizes and compile=True.

Before: the sinks were the batch's first `sinks` slots, so a left-padded row's were padding and, once the window
evicted, its tokens and logits differed from alone (every test here but the speculative one failed; speculative
decoding through a window runs its rows one at a time)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk

# 21, 15, 2 and 7 tokens: the second row is padded and longer than size + sinks, so its sinks move within the
# prompt's own block; the others are padded past them.
PROMPTS = [
    [(3 * i) % 40 + 1 for i in range(21)],
    [(5 * i) % 37 + 2 for i in range(15)],
    [7, 8],
    [9, 10, 11, 9, 4, 5, 6],
]
SEEDS = [11, 12, 13, 14]
CACHE = "window(size=6, sinks=3, slack=4)"
SAMPLED = "top_k(20) | temperature(0.9)"


def rope_gpt(seed: int = 0) -> GPT:
    """A random rotary GPT of context 32 whose embedding is scaled up: peaked enough that tokens tell rows apart."""
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=41, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32)
    model = GPT(dataclasses.replace(config, position="rope")).eval()
    with torch.no_grad():
        model.wte.weight.mul_(3.0)
    return model


def each_as_alone(model: Any, prompts: list[Any], new: int, **options: Any) -> None:
    """The batch decoded with one seed per row; each row's tokens and log-probabilities equal its prompt's alone."""
    out = dk.decode(model, prompts, max_new_tokens=new, seed=SEEDS[: len(prompts)], logprobs=0, **options)
    for b, prompt in enumerate(prompts):
        alone = dk.decode(model, [prompt], max_new_tokens=new, seed=[SEEDS[b]], logprobs=0, **options)
        assert out.tokens[b] == alone.tokens[0], f"row {b}: tokens differ from alone"
        assert out.logprobs is not None and alone.logprobs is not None
        got = torch.tensor([t.raw for t in out.logprobs[b]])
        want = torch.tensor([t.raw for t in alone.logprobs[0]])
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0, msg=lambda m, b=b: f"row {b}: {m}")  # type: ignore[misc]
        assert len(out.tokens[b]) == new


@pytest.mark.parametrize("chain", ["greedy", SAMPLED])
def test_a_ragged_batch_decodes_each_row_as_alone(chain: str) -> None:
    each_as_alone(rope_gpt(), PROMPTS, 40, cache=CACHE, chain=chain, stop_tokens=[])


@pytest.mark.parametrize("chain", ["greedy", SAMPLED])
def test_per_layer_sizes(chain: str) -> None:
    each_as_alone(rope_gpt(1), PROMPTS, 40, cache="window(size=[5, 9], sinks=2, slack=3)", chain=chain, stop_tokens=[])


def test_tiny_shakespeare() -> None:
    model = dk.load_model("tiny-shakespeare")
    prompts = ["ROMEO:", "JULIET: O Romeo, Romeo, wherefore art thou", "KING HENRY: Once more"]
    prompts = [model.tokenizer.encode(p) for p in prompts]  # type: ignore[attr-defined]
    each_as_alone(model, prompts, 60, cache="window(size=12, sinks=4, slack=4)", chain=SAMPLED, stop_tokens=[])


def test_beam_search_reorders_rows_as_alone() -> None:
    each_as_alone(rope_gpt(2), PROMPTS[:3], 30, cache=CACHE, strategy="beam", num_beams=3)


def test_speculative_decoding_with_a_draft() -> None:
    target, draft = rope_gpt(3), rope_gpt(4)
    options = {"strategy": "speculative", "draft": draft, "k": 3, "stop_tokens": []}
    each_as_alone(target, PROMPTS, 30, cache=CACHE, chain=SAMPLED, **options)


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
def test_compiled() -> None:
    each_as_alone(rope_gpt(5), PROMPTS[1:3], 30, cache=CACHE, chain="greedy", stop_tokens=[], compile=True)


def _left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(map(len, prompts))
    ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts])
    positions = torch.arange(P)[None] - torch.tensor([P - len(p) for p in prompts])[:, None]
    return ids, positions


@torch.no_grad()
def _logits(model: GPT, prompts: list[list[int]], cache: str) -> list[torch.Tensor]:
    """Each step's last logits `[B, V]`: the prompt, 20 single tokens (evicting), a crop of 4, a block of 7 (past the
    slack), 3 more tokens; every row fed the same tokens after its prompt."""
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=len(prompts), capacity=1))
    ids, positions = _left_padded(prompts)
    out = [model(ids, positions, kv)[:, -1]]
    tokens = torch.randint(1, 41, (1, 30), generator=torch.Generator().manual_seed(7)).expand(len(prompts), -1)

    def feed(first: int, n: int) -> None:
        slots = torch.arange(kv.length, kv.length + n)[None]
        out.append(model(tokens[:, first : first + n], slots + positions[:, :1], kv)[:, -1])  # slot - padding

    for t in range(20):
        feed(t, 1)
    kv.crop(kv.length - 4)  # type: ignore[attr-defined]
    feed(20, 7)
    for t in range(27, 30):
        feed(t, 1)
    return out


def test_crop_after_eviction_and_a_long_block() -> None:
    """At the model's level: a row's logits at every step equal its own alone, across a crop once the window has
    evicted and a teacher-forced block longer than the slack."""
    model = rope_gpt(6)
    batch = _logits(model, PROMPTS, CACHE)
    for b, prompt in enumerate(PROMPTS):
        alone = _logits(model, [prompt], CACHE)
        for step, (got, want) in enumerate(zip(batch, alone)):
            where = f"row {b}, step {step}"
            torch.testing.assert_close(got[b], want[0], atol=1e-4, rtol=0, msg=lambda m, w=where: f"{w}: {m}")  # type: ignore[misc]


def test_the_sinks_room_is_nan_until_the_mask_is_asked() -> None:
    """A block whose queries need moved sinks gets room for them in front of the keys, filled when the mask says where
    each row starts: a model that attended before asking would see NaN (a NumericsError downstream), never zeros
    (before: zeros, wrong attention without a sign). Asked, the room holds each row's sinks and no NaN is left."""
    spec = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=2, head_dim=4, batch_size=2, capacity=1, rope_base=10000.0)
    kv = dk.create_cache(CACHE, spec)
    k, v = torch.randn(2, 2, 15, 4), torch.randn(2, 2, 15, 4)
    keys, values = kv.update(0, k, v)
    room = keys.shape[2] - 15
    assert room > 0 and keys[:, :, :room].isnan().all() and values[:, :, :room].isnan().all()
    positions = torch.arange(15)[None] - torch.tensor([[0], [4]])  # the second row padded by 4
    kv.attention_mask(0, positions)
    assert not keys.isnan().any() and not values.isnan().any()

"""The model <-> cache contract with a cache that evicts: positions, masks, and the context check."""

from __future__ import annotations

import dataclasses
from typing import Literal

import pytest
import torch
from decodekit_cache_window.cache import WindowCache
from decodekit_cache_window.params import WindowParams
from decodekit_cache_window.sizes import auto_sizes
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
from decodekit.errors import ContextLengthError


def rope_gpt(n_layer: int, block_size: int = 32, position: Literal["learned", "rope"] = "rope") -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=17, block_size=block_size, n_layer=n_layer, n_head=4, n_kv_head=2, n_embd=32)
    config = dataclasses.replace(config, position=position)
    return GPT(config).eval()


def window(model: GPT, size: int, sinks: int, batch: int = 1, store: str = "gqa") -> WindowCache:
    spec = dk.CacheSpec.for_model(model.spec, batch_size=batch, capacity=1)
    return WindowCache(spec, WindowParams(size=size, sinks=sinks, slack=4, store=store))


@torch.no_grad()
def test_one_layer_window_equals_recomputing_sinks_plus_window() -> None:
    """StreamingLLM's claim, exactly: with one layer, keys depend on their token and position alone, so
    attending over sinks + the last `size` tokens through the cache equals a fresh forward over just
    those tokens at positions 0 .. S-1, at every step, far past the model's context."""
    model, size, sinks = rope_gpt(n_layer=1), 8, 2
    ids = torch.randint(0, 17, (1, 100), generator=torch.Generator().manual_seed(1))
    cache = window(model, size, sinks)
    for t in range(100):
        got = model(ids[:, t : t + 1], torch.tensor([[t]]), cache)[:, -1]
        kept = [*range(min(sinks, max(0, t - size + 1))), *range(max(0, t - size + 1), t + 1)]
        want = model(ids[:, kept], torch.arange(len(kept))[None], None)[:, -1]
        torch.testing.assert_close(got, want, atol=2e-5, rtol=0, msg=lambda m, t=t: f"step {t}: {m}")  # type: ignore[misc]  # t=t binds the step


@torch.no_grad()
def test_prefill_in_blocks_equals_one_token_at_a_time() -> None:
    """A block longer than the slack sees, query by query, the same keys at the same distances as single steps."""
    model = rope_gpt(n_layer=2)
    ids = torch.randint(0, 17, (1, 60), generator=torch.Generator().manual_seed(2))
    one = window(model, 8, 2)
    singles = torch.cat([model(ids[:, t : t + 1], torch.tensor([[t]]), one) for t in range(60)], 1)
    blocks = window(model, 8, 2)
    chunks = [model(ids[:, a : a + 10], torch.arange(a, a + 10)[None], blocks) for a in range(0, 60, 10)]
    torch.testing.assert_close(torch.cat(chunks, 1), singles, atol=2e-5, rtol=0)


@torch.no_grad()
def test_padded_row_decodes_as_alone_while_nothing_is_evicted() -> None:
    model = rope_gpt(n_layer=2)
    rows = [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    batch = dk.generate(model, rows, max_new_tokens=5, chain="greedy", cache="gqa").tokens
    cache = window(model, 20, 2, batch=2)
    buf = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 0, 7, 8, 9]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 5], [-3, -2, -1, 0, 1, 2]])
    logits = model(buf, pos, cache)[:, -1]
    assert logits.argmax(-1).tolist() == [batch[0][0], batch[1][0]]


@torch.no_grad()
def test_full_cache_stops_at_the_context_and_window_goes_on() -> None:
    model = rope_gpt(n_layer=2, block_size=32)
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=64)
    gqa = dk.create_cache("gqa", spec)
    model(torch.zeros(1, 32, dtype=torch.long), torch.arange(32)[None], gqa)
    with pytest.raises(ContextLengthError, match="block_size=32"):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[32]]), gqa)
    cache = window(model, 16, 4)
    for t in range(200):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[t]]), cache)
    assert cache.length == 200


def test_window_wider_than_the_context_is_refused() -> None:
    """Where the text can pass the context (a capacity past it); a shorter one never meets the window's edge."""
    model = rope_gpt(n_layer=2, block_size=32)
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=33)
    with pytest.raises(dk.ParameterError, match=r"size \+ sinks <= 32"):
        WindowCache(spec, WindowParams(size=30, sinks=4, slack=4))
    window(model, 30, 4)  # a capacity of 1


@torch.no_grad()
def test_learned_positions_end_at_the_context_whatever_the_cache() -> None:
    model = rope_gpt(n_layer=1, block_size=16, position="learned")
    cache = window(model, 8, 2)
    for t in range(16):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[t]]), cache)
    with pytest.raises(ContextLengthError, match="learned positions"):
        model(torch.zeros(1, 1, dtype=torch.long), torch.tensor([[16]]), cache)


def test_the_default_model_ships_its_calibration_and_streams_past_its_context() -> None:
    model = dk.load_model("tiny-shakespeare")
    assert model.spec.attention_windows is None and model.spec.calibration is not None  # read when "auto" needs it
    windows = auto_sizes(dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1))
    assert len(windows) == 4 and all(1 <= w <= 252 for w in windows)
    out = dk.generate(model, "ROMEO:", cache='window(size="auto")', max_new_tokens=300, seed=0)
    assert len(out.tokens[0]) == 300  # past the 256-character context
    with pytest.raises(ContextLengthError, match="context of 256 positions"):
        dk.generate(model, "ROMEO:", cache="gqa", max_new_tokens=300)

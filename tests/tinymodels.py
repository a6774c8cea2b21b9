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


SAMPLED_CHAIN = "repetition_penalty(1.3) | temperature(0.7) | top_k(20) | top_p(0.9) | sample"
SAMPLED = dict(do_sample=True, repetition_penalty=1.3, temperature=0.7, top_k=20, top_p=0.9)  # its generate() form


def generate_step(hf: Any, text: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """`generate()`'s raw and processed log-probabilities `[V]` for the token after `text` under `SAMPLED` (the row
    alone: its repetition penalty would count a padded batch's pad ids)."""
    out = hf.generate(
        torch.tensor([text]),
        generation_config=greedy_generation_config(max_new_tokens=1, **SAMPLED),
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
    )
    return torch.log_softmax(out.logits[0][0].float(), -1), torch.log_softmax(out.scores[0][0].float(), -1)


def assert_sampled_chain_sees_generate(hf: Any, model: Any, prompts: list[list[int]], what: str, new: int = 5) -> None:
    """A seeded `SAMPLED_CHAIN` decode of `prompts` by `model` (decodekit's `HFModel` of the transformers model
    `hf`): at each step the chain's kept tokens and their log-probabilities (top 20: all `top_k(20)` leaves) and the
    model's raw ones are `generate()`'s with the same processors on the same text, and top_p cuts in more than one
    place (the distributions compared are not all alike)."""
    import pytest

    import decodekit as dk

    out = dk.generate(model, prompts, chain=SAMPLED_CHAIN, max_new_tokens=new, seed=1, logprobs=20)
    assert out.logprobs is not None
    kept_counts = set()
    for prompt, tokens, logprobs in zip(prompts, out.tokens, out.logprobs):
        for step, (token, lp) in enumerate(zip(tokens, logprobs)):
            raw, processed = generate_step(hf, prompt + tokens[:step])
            kept = torch.isfinite(processed).nonzero()[:, 0].tolist()
            assert sorted(i for i, _ in lp.processed_top) == kept, (what, step)
            kept_counts.add(len(kept))
            for i, value in lp.processed_top:
                assert value == pytest.approx(processed[i].item(), abs=1e-5)
            assert lp.raw == pytest.approx(raw[token].item(), abs=1e-5)
            assert lp.processed == pytest.approx(processed[token].item(), abs=1e-5)
    assert len(kept_counts) > 1, what


def int8_round_trip(x: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 per (row, head, token) as decodekit's `int8` storage keeps `x`, written apart from it (a second
    implementation): scale `max|x| / 127` (1 for a zero vector), codes rounded and clamped to -127..127."""
    scale = x.float().abs().amax(-1, keepdim=True) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return ((x.float() / scale).round().clamp(-127, 127) * scale).to(x.dtype)


def greedy_recomputed(hf: Any, prompt: list[int], n: int) -> list[int]:
    """transformers' greedy tokens for `prompt` alone, its forward over the whole text at every step (no cache)."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, hf(ids).logits[:, -1:].argmax(-1)], 1)
    return ids[0, len(prompt) :].tolist()


@torch.no_grad()
def assert_window_moves_sinks_as_transformers(hf: Any, model: Any, steps: int = 100) -> None:
    """StreamingLLM's claim, exactly, on a one-layer transformers model `hf` (`model`: its `HFModel`): token by token
    through `window(size=8, sinks=2)`, far past a 32-position context, the logits transformers gives over the sinks
    and the last 8 tokens at positions 0 .. S-1 (the oracle runs no decodekit rotary code)."""
    import decodekit as dk

    size, sinks = 8, 2
    ids = torch.randint(0, 96, (1, steps), generator=torch.Generator().manual_seed(1))
    cache = dk.create_cache(
        f"window(size={size}, sinks={sinks}, slack=4)", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1)
    )
    for t in range(steps):
        got = model(ids[:, t : t + 1], torch.tensor([[t]]), cache)[:, -1]
        kept = [*range(min(sinks, max(0, t - size + 1))), *range(max(0, t - size + 1), t + 1)]
        want = hf(ids[:, kept], position_ids=torch.arange(len(kept))[None]).logits[:, -1]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0, msg=lambda m, t=t: f"step {t}: {m}")  # type: ignore[misc]

"""`prompt_logprobs` on transformers models: against the transformers model's own logits (each prompt alone), and a
prompt past the context, prefilled in blocks through a window, against the window fed one token at a time."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_hf.model import HFModel

import decodekit as dk

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]


def expected(logits: torch.Tensor, prompt: list[int], n: int) -> list[tuple[float, int, list[int]]]:
    """(logprob, rank, top ids) of each prompt token after the first, from logits `[T, V]` of the prompt's columns."""
    lp = torch.log_softmax(logits.float(), -1)
    out = []
    for i in range(1, len(prompt)):
        row, token = lp[i - 1], prompt[i]
        out.append((row[token].item(), int((row > row[token]).sum()) + 1, row.topk(n).indices.tolist()))
    return out


def assert_matches(got: list[Any], want: list[tuple[float, int, list[int]]]) -> None:
    assert got[0] is None and len(got) == len(want) + 1
    assert [g.logprob for g in got[1:]] == pytest.approx([w[0] for w in want], abs=1e-5)
    assert [(g.rank, [i for i, _ in g.top]) for g in got[1:]] == [(w[1], w[2]) for w in want]


@pytest.mark.parametrize("cache", ["dense", "none", "window(size=32)"])
@torch.no_grad()
def test_a_ragged_batch_equals_transformers_logits_of_each_prompt(hf_model: Any, cache: str) -> None:
    out = dk.generate(HFModel(hf_model), PROMPTS, cache=cache, max_new_tokens=0, prompt_logprobs=3)
    assert out.prompt_logprobs is not None
    for prompt, got in zip(PROMPTS, out.prompt_logprobs):
        assert_matches(got, expected(hf_model(torch.tensor([prompt])).logits[0], prompt, 3))


@torch.no_grad()
def test_a_prompt_past_the_context_goes_in_blocks_as_single_steps_see_it(build_arch: Any) -> None:
    """60 tokens, a context of 32: two blocks through the window, each query attending as a single step would."""
    model = HFModel(build_arch("llama", max_position_embeddings=32, num_key_value_heads=2))
    prompt = torch.randint(0, 96, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    cache = "window(size=8, sinks=2, slack=4)"
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1))
    singles = torch.cat([model(torch.tensor([[t]]), torch.tensor([[i]]), kv) for i, t in enumerate(prompt)], 1)
    out = dk.generate(model, [prompt], cache=cache, max_new_tokens=1, prompt_logprobs=2)
    assert out.prompt_logprobs is not None
    assert_matches(out.prompt_logprobs[0], expected(singles[0], prompt, 2))

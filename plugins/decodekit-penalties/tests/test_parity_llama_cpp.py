"""llama.cpp's `penalties` sampler (`llama_sampler_init_penalties(penalty_last_n, penalty_repeat, penalty_freq,
penalty_present)`) as a decodekit chain, against a plain-Python second implementation of its rule.

llama.cpp counts the last `penalty_last_n` tokens the sampler accepted: llama-cli and llama-server accept the
prompt's tokens too, so the window reaches into the prompt. For each token with count c > 0 it applies, in order,
the repeat penalty (logit <= 0: times penalty_repeat, else divided by it), then
`logit -= c * penalty_freq + penalty_present`. The chain is
`repetition_penalty(r, n) | frequency_penalty(f, n, true) | presence_penalty(p, n, true)`.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import Tensor

import decodekit as dk


def llama_cpp_penalties(
    logits: list[float], history: list[int], last_n: int, r: float, f: float, p: float
) -> list[float]:
    """One row, the way llama.cpp's penalties sampler works: a count over the last `last_n` tokens."""
    counts = Counter(history[-last_n:])
    out = list(logits)
    for token, c in counts.items():
        x = out[token]
        x = x * r if x <= 0 else x / r
        out[token] = x - (c * f + p)
    return out


def chain(last_n: int, r: float, f: float, p: float) -> dk.Chain:
    n = last_n
    return dk.Chain.parse(
        f"repetition_penalty({r}, {n}) | frequency_penalty({f}, {n}, true) | presence_penalty({p}, {n}, true)"
    )


def test_hand_worked_window_reaching_into_the_prompt() -> None:
    # Prompt [1, 2, 2], generated [3, 2]; the last 4 tokens are [2, 2, 3, 2]: token 2 three times, 3 once.
    # Logits 1.0 everywhere; repeat 2, frequency 0.5, presence 0.25:
    # token 2: 1 / 2 - (3 * 0.5 + 0.25) = -1.25; token 3: 1 / 2 - (0.5 + 0.25) = -0.25; token 1 is outside the window.
    ctx = dk.DecodeContext(tokens=torch.tensor([[1, 2, 2, 3, 2]]), step=2)
    out = chain(4, 2.0, 0.5, 0.25).process(torch.ones(1, 5), ctx)
    assert out.tolist() == [[1.0, 1.0, -1.25, -0.25, 1.0]]
    # Without include_prompt (OpenAI's and vLLM's rule) only the generated [3, 2] count, once each.
    generated_only = dk.Chain.parse("frequency_penalty(0.5, 4) | presence_penalty(0.25, 4)").process(
        torch.ones(1, 5), ctx
    )
    assert generated_only.tolist() == [[1.0, 1.0, 0.25, 0.25, 1.0]]


@pytest.mark.parametrize("last_n", [1, 8, 64, 1000])
@pytest.mark.parametrize("seed", range(3))
def test_ragged_batch_matches_llama_cpp_row_by_row(last_n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    V, step = 24, 5
    rows = [torch.randint(0, V, (n,), generator=g).tolist() for n in (6, 40, 12, 5)]  # prompts of 1 to 35 tokens
    rows[2][-1] = 0  # id 0 is a real token in one row, and the padding id everywhere
    T = max(len(r) for r in rows)
    padded = torch.tensor([[0] * (T - len(r)) + r for r in rows])
    prompt_lengths = torch.tensor([len(r) - step for r in rows])
    x = torch.randn(len(rows), V, generator=g) * 2
    ctx = dk.DecodeContext(tokens=padded, prompt_lengths=prompt_lengths, step=step)
    ours: Tensor = chain(last_n, 1.3, 0.4, 0.6).process(x.clone(), ctx)
    for b, r in enumerate(rows):
        expected = torch.tensor(llama_cpp_penalties(x[b].tolist(), r, last_n, 1.3, 0.4, 0.6))
        torch.testing.assert_close(ours[b], expected, rtol=1e-6, atol=1e-6)
    assert not torch.equal(ours, x)

"""`crop_rows` on a real model, every scored cache, evicting and `prefill_only`: a ragged batch's rows taken back by
different amounts and moved to end together attend on as each row taken back alone (`crop(ends[b])`). The kit
(`ScoredCacheConformance.test_crop_rows`) holds the evicting ones to it entry by entry; `prefill_only` keeps every
token after the prompt, which the kit does not state, so it is held to it here."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT

import decodekit as dk
from decodekit.prompts import left_pad

CACHES = ["h2o", "tova", "snapkv", "knorm", "streaming"]
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [7, 8, 9]]  # row 1 starts at slot 10
BLOCK, MORE = 5, 3  # tokens after the prompt, then after the crop


@torch.no_grad()
def _cropped(model: GPT, cache: str, crop: Any, kept: list[int]) -> torch.Tensor:
    """Logits `[B, MORE, V]`: the prompts, a block of BLOCK tokens, `crop(kv)`, then MORE tokens one at a time, row b
    from position `kept[b]` on."""
    g = torch.Generator().manual_seed(2)
    block, more = torch.randint(1, 29, (2, BLOCK), generator=g), torch.randint(1, 29, (2, MORE), generator=g)
    ids, positions = left_pad(PROMPTS, len(PROMPTS[0]), "cpu")
    spec = dk.CacheSpec.for_model(model.spec, batch_size=2, capacity=len(PROMPTS[0]) + BLOCK + MORE + 4)
    kv = dk.create_cache(cache, spec)
    model(ids, positions, kv)
    model(block, positions[:, -1:] + 1 + torch.arange(BLOCK), kv)
    crop(kv)
    at = torch.tensor(kept)[:, None] + torch.arange(MORE)
    return torch.cat([model(more[:, t : t + 1], at[:, t : t + 1], kv) for t in range(MORE)], 1)


@pytest.mark.parametrize("prefill_only", [False, True])
@pytest.mark.parametrize("cache", CACHES)
def test_each_row_attends_on_as_taken_back_alone(model: GPT, cache: str, prefill_only: bool) -> None:
    made = f"{cache}(budget=6, sinks=1, recent=2, prefill_only={prefill_only})"
    n = len(PROMPTS[0]) + BLOCK
    ends = [n - 3, n - 1]  # row 0 gives back 3 tokens, row 1 one
    kept = [ends[0], ends[1] - 10]  # its tokens: row 1's start at slot 10
    for length in (n - 1, n - 3):  # row 0 moved right 2; row 1 moved left 2 (into its padding)
        got = _cropped(model, made, lambda kv, length=length: kv.crop_rows(ends, length), kept)
        for b, end in enumerate(ends):
            alone = _cropped(model, made, lambda kv, end=end: kv.crop(end), kept)
            torch.testing.assert_close(got[b], alone[b], rtol=1e-5, atol=1e-5, msg=f"length={length}, row {b}")


def test_prefill_only_refuses_a_row_taken_back_into_its_prompt(model: GPT) -> None:
    spec = dk.CacheSpec.for_model(model.spec, batch_size=2, capacity=24)
    kv: Any = dk.create_cache("h2o(budget=6, sinks=1, recent=2, prefill_only=True)", spec)
    ids, positions = left_pad(PROMPTS, 13, "cpu")
    model(ids, positions, kv)
    model(ids[:, :4], positions[:, -1:] + 1 + torch.arange(4), kv)
    allowed = r"allowed: 13 <= ends\[1\] <= 17, or ends\[1\] <= 10 \(the row keeps none of its tokens\)"
    with pytest.raises(dk.ParameterError, match=rf"h2o.crop_rows: ends\[1\]=12 is invalid: .*{allowed}"):
        kv.crop_rows([16, 12], 16)
    kv.crop_rows([16, 10], 16)  # row 1 keeps nothing: its prompt too
    assert kv.length == 16 and (kv.kept(0)[1] >= 0).sum() == 0

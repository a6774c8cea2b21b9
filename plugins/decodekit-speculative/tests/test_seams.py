"""Seams between speculative decoding and the engine: what `dk.generate` does, the strategy does too."""

from __future__ import annotations

from typing import Any, Literal

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig
from decodekit_speculative import strategy

import decodekit as dk


def _gpt(seed: int, block_size: int, position: Literal["learned", "rope"]) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=101, block_size=block_size, n_layer=1, n_head=2, n_kv_head=1, n_embd=16, position=position
    )
    model = GPT(config).eval()
    with torch.no_grad():
        model.wte.weight.mul_(3.0)
    return model


@pytest.mark.parametrize(
    ("draft_context", "draft_position", "cache"),
    [
        (32, "learned", "window(size=8, sinks=2)"),  # the draft keeps every token: learned positions end at 32
        (32, "rope", 'window(size="auto", sinks=2)'),  # no calibration for "auto": the draft keeps every token
        (16, "rope", "dense"),  # a draft with a shorter context than the target's
    ],
)
def test_a_draft_past_its_context_proposes_nothing_and_the_output_is_the_targets(
    draft_context: int, draft_position: Literal["learned", "rope"], cache: str
) -> None:
    """Before: the draft was fed past its context, and the decode failed mid-run (after 20-odd tokens had
    been streamed) with the draft's ContextLengthError; `dk.validate` passed. A draft never sees more
    than its context now (unless its cache evicts): past it, the target decodes alone."""
    target = _gpt(0, 32, "rope")
    target.attention_windows = (8,)  # type: ignore[attr-defined]  # a calibration, for window(size="auto")
    draft = _gpt(1, draft_context, draft_position)
    prompts = [[5, 17, 3], [9, 44, 2, 7, 7, 1]]
    new = 60 if cache != "dense" else 24
    ref = dk.generate(target, prompts, chain="greedy", max_new_tokens=new, cache=cache)
    out = dk.decode(
        target, prompts, strategy="speculative", draft=draft, k=3, chain="greedy", max_new_tokens=new, cache=cache
    )
    assert out.tokens == ref.tokens
    assert isinstance(out, strategy.SpeculativeGeneration) and sum(out.drafted) > 0


def test_a_row_that_ended_past_the_drafts_context_is_not_fed_past_it() -> None:
    """Rows that ended are fed along (junk at their last position), so they count: before, a ContextLengthError;
    a bound over the live rows alone fed this ended row at position 16 to a 16-position draft (an IndexError)."""
    target, draft = _gpt(0, 32, "rope"), _gpt(1, 16, "learned")
    prompts = [[69, 35], [30, 97, 61], [78, 36, 86, 45, 75, 81, 79, 16, 91, 39, 49, 95]]  # the third ends at 17
    ref = dk.generate(target, prompts, chain="greedy", max_new_tokens=5)
    out = dk.decode(target, prompts, strategy="speculative", draft=draft, k=3, chain="greedy", max_new_tokens=5)
    assert out.tokens == ref.tokens


def test_a_ragged_batch_through_a_window_gives_each_rows_tokens_alone() -> None:
    """A window verifies a ragged batch in one forward, each row taken back by its own amount (`crop_rows`): each
    row's tokens alone, past eviction, as a ragged `dk.generate` batch gives them."""
    target = _gpt(0, 32, "rope")
    prompts = [[5, 17, 3], [9, 44, 2, 7, 7, 1, 3, 5, 8]]
    cache = "window(size=8, sinks=2)"
    alone = [dk.generate(target, [p], chain="greedy", max_new_tokens=40, cache=cache).tokens[0] for p in prompts]
    out = dk.decode(target, prompts, strategy="speculative(k=3)", chain="greedy", max_new_tokens=40, cache=cache)
    assert out.tokens == alone


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("which", ["itself", "ngram"])
def test_a_position_past_a_stop_token_is_never_an_error(which: str, k: int) -> None:
    """Before: the draft drafted, and the target verified, past a row's stop token; where the chain leaves no
    token after it (here no_repeat_ngram(1) on 6 tokens: every one is used once the stop token is out) that
    was a NumericsError `dk.generate` never meets (k = 2 and 8). A position past the end is never emitted."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=6, block_size=32, n_layer=1, n_head=2, n_kv_head=1, n_embd=16)
    target = GPT(config).eval()
    chain = "no_repeat_ngram(1) | greedy"
    free = dk.generate(target, [[0]], chain=chain, max_new_tokens=5)  # [[1, 4, 2, 3, 5]]: all six used
    options: dict[str, Any] = {"chain": chain, "max_new_tokens": 20, "stop_tokens": [free.tokens[0][-1]]}
    ref = dk.generate(target, [[0]], **options)
    draft = target if which == "itself" else "ngram"
    out = dk.decode(target, [[0]], strategy="speculative", draft=draft, k=k, **options)
    assert (out.tokens, out.finish_reasons) == (ref.tokens, ref.finish_reasons) == (free.tokens, ["stop"])


@pytest.mark.parametrize("draft_position", ["ngram", "learned"])
def test_a_huge_max_new_tokens_through_an_evicting_cache_runs_until_a_stop_token(
    draft_position: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dk.generate` grows its history as it is used, so `max_new_tokens=2**40` runs until a stop token. Before,
    speculation allocated its history (and a draft's cache that keeps every token) for all of them: a
    RuntimeError from torch's allocator ("unexpected RuntimeError" on the command line). Here the history
    starts at 8 columns, so it grows several times before the stop token (its first use: token 74)."""
    monkeypatch.setattr(strategy, "PREALLOCATED_COLUMNS", 8)
    target = _gpt(0, 32, "rope")
    options: dict[str, Any] = {"chain": "no_repeat_ngram(2) | greedy", "cache": "window(size=8, sinks=2)"}
    ref = dk.generate(target, [[5, 17, 3]], max_new_tokens=2**40, stop_tokens=[47], **options)
    assert len(ref.tokens[0]) == 75
    draft = "ngram" if draft_position == "ngram" else _gpt(1, 32, "learned")
    out = dk.decode(
        target,
        [[5, 17, 3]],
        strategy="speculative",
        draft=draft,
        k=3,
        max_new_tokens=2**40,
        stop_tokens=[47],
        **options,
    )
    assert (out.tokens, out.finish_reasons) == (ref.tokens, ["stop"])

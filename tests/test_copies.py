"""A prompt's copies (`n` samples, beams, a prompt given twice) are prefilled once: the model computes each distinct
prompt one time, and every result equals the decode that computes every row (the engine with sharing turned off)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
import decodekit.engine
from decodekit.copies import CopiesView
from decodekit.results import prompt_logprobs
from tinymodels import tiny_gpt

A, B = [5, 17, 3, 9, 44, 2, 8], [7, 8]
CACHES = [
    "dense",
    "gqa",
    "int8",
    "window(size=16)",
    "window(size=8, sinks=2)",
    "h2o(budget=16)",
    "snapkv(budget=16)",
    "tova(budget=16)",
    "streaming(budget=16)",
]


@pytest.fixture(scope="module")
def gpt() -> GPT:
    return tiny_gpt(2)


def _prefill_rows(model: GPT, call: Any) -> tuple[Any, list[int]]:
    """`call()`'s result and the rows of each forward it made."""
    rows: list[int] = []
    hook = model.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    try:
        return call(), rows
    finally:
        hook.remove()


def _unshared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decodekit.engine, "distinct_rows", lambda tokens, positions: None)


def _assert_same(shared: dk.Generation, unshared: dk.Generation) -> None:
    assert shared.tokens == unshared.tokens
    assert shared.finish_reasons == unshared.finish_reasons
    for mine, theirs in zip(shared.logprobs or [], unshared.logprobs or []):
        assert [lp.raw for lp in mine] == pytest.approx([lp.raw for lp in theirs], abs=1e-5)
    for mine_p, theirs_p in zip(shared.prompt_logprobs or [], unshared.prompt_logprobs or []):
        assert [p and p.logprob for p in mine_p] == pytest.approx([p and p.logprob for p in theirs_p], abs=1e-5)
        assert [p and p.rank for p in mine_p] == [p and p.rank for p in theirs_p]


@pytest.mark.parametrize("cache", CACHES)
def test_copies_are_prefilled_once_and_decode_as_every_row_computed(
    gpt: GPT, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts, seeds = [A, B, A, A, B], [1, 2, 3, 4, 5]
    options: dict[str, Any] = {"max_new_tokens": 12, "seed": seeds, "cache": cache, "logprobs": 2}
    options["prompt_logprobs"] = 1
    shared, rows = _prefill_rows(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert rows[0] == 2 and rows[1:] == [5] * (len(rows) - 1)  # two distinct prompts, then every row each step
    _unshared(monkeypatch)
    unshared, rows = _prefill_rows(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert rows[0] == 5
    _assert_same(shared, unshared)
    for b, prompt in enumerate(prompts):  # each row as its prompt alone with its seed
        alone = dk.generate(gpt, [prompt], **{**options, "seed": [seeds[b]]})
        assert alone.tokens[0] == shared.tokens[b]


@pytest.mark.parametrize("cache", ["window(size=8, sinks=2)", "snapkv(budget=16)"])
def test_copies_spaced_unevenly_decode_as_every_row_computed(
    gpt: GPT, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies at rows 0, 1 and 4 beside two prompts of their own: the view gathers the distinct rows (rows 0, 2, 3)
    rather than handing out a slice of what the cache returns."""
    prompts = [A, A, B, [1, 2, 3], A]
    options: dict[str, Any] = {"max_new_tokens": 12, "seed": [1, 2, 3, 4, 5], "cache": cache, "logprobs": 2}
    shared, rows = _prefill_rows(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert rows[0] == 3
    _unshared(monkeypatch)
    _assert_same(shared, dk.generate(gpt, prompts, **options))


@pytest.mark.parametrize("cache", ["window(size=16)", "h2o(budget=16)", "streaming(budget=16)"])
def test_copies_of_a_prompt_past_the_context_are_prefilled_once_in_each_block(
    cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=101, block_size=32, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope")
    rotary = GPT(config).eval()
    long = [(7 * i) % 101 for i in range(80)]  # past the 32-position context: prefilled in blocks of 32
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": [1, 2, 3], "cache": cache, "prompt_logprobs": 0}
    shared, rows = _prefill_rows(rotary, lambda: dk.generate(rotary, [long, long, A], **options))
    assert rows[:3] == [2, 2, 2]  # three blocks of two distinct prompts
    _unshared(monkeypatch)
    _assert_same(shared, dk.generate(rotary, [long, long, A], **options))


def test_beams_share_their_prompts_prefill(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    options: dict[str, Any] = {"strategy": "beam(num_beams=3, num_return_sequences=2)", "max_new_tokens": 8}
    shared, rows = _prefill_rows(gpt, lambda: dk.decode(gpt, [A, B], **options))
    assert rows[0] == 2  # not 2 prompts x 3 beams
    _unshared(monkeypatch)
    unshared, rows = _prefill_rows(gpt, lambda: dk.decode(gpt, [A, B], **options))
    assert rows[0] == 6
    assert shared.tokens == unshared.tokens


def test_prompt_logprobs_of_copies_are_read_from_the_prefills_own_logits(
    gpt: GPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the prefill's logits `[distinct rows, T, V]` were gathered to every row (`logits[copies]`) to be scored,
    so 16 samples of a prompt held 17 rows of prompt logits where the forward made one."""
    outputs: list[torch.Tensor] = []
    hook = gpt.register_forward_hook(lambda module, args, out: outputs.append(out))
    scored: list[torch.Tensor] = []

    def spy(logits: torch.Tensor, *rest: Any) -> Any:
        scored.append(logits)
        return prompt_logprobs(logits, *rest)

    monkeypatch.setattr(decodekit.engine, "prompt_logprobs", spy)
    try:
        out = dk.generate(gpt, [A] * 4 + [B] * 4, max_new_tokens=2, seed=0, prompt_logprobs=1)
    finally:
        hook.remove()
    assert outputs[0].shape[0] == 2 and len(scored) == 8
    assert {logits.untyped_storage().data_ptr() for logits in scored} == {outputs[0].untyped_storage().data_ptr()}
    assert out.prompt_logprobs is not None and out.prompt_logprobs[0] == out.prompt_logprobs[3]


def test_the_same_tokens_with_other_padding_are_not_copies(gpt: GPT) -> None:
    """Padding is id 0: `[0, 5]` left-padded beside a longer prompt has the tokens of `[5]` padded once more, at
    other positions; the two are different prompts."""
    out, rows = _prefill_rows(gpt, lambda: dk.generate(gpt, [[0, 5], [5], [1, 2, 3]], max_new_tokens=4, seed=[1, 1, 1]))
    assert rows[0] == 3
    assert out.tokens[0] == dk.generate(gpt, [[0, 5]], max_new_tokens=4, seed=[1]).tokens[0]
    assert out.tokens[1] == dk.generate(gpt, [[5]], max_new_tokens=4, seed=[1]).tokens[0]


def test_without_copies_the_prefill_is_the_batch_as_given(gpt: GPT) -> None:
    _, rows = _prefill_rows(gpt, lambda: dk.generate(gpt, [A, B, [1]], max_new_tokens=2, seed=0))
    assert rows[0] == 3
    assert torch.equal(torch.tensor(rows[1:]), torch.full((len(rows) - 1,), 3))


def test_the_view_of_the_cache_copies_as_an_object_does(gpt: GPT) -> None:
    """A model may copy what it is handed. Before: `copy.copy(view)` recursed without end ('RecursionError: maximum
    recursion depth exceeded'): `__getattr__` read `kv` on the instance copy made before filling it."""
    kv = dk.create_cache("dense", dk.CacheSpec.for_model(gpt.spec, batch_size=3, capacity=8))
    view = CopiesView(kv, torch.tensor([0, 2]), torch.tensor([0, 0, 1]))
    copied = copy.copy(view)
    assert copied.kv is kv and copied.spec.batch_size == 2 and copied.length == 0

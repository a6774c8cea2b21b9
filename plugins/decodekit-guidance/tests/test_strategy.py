"""`cfg` on the kit's TinyLM against a second implementation (`reference.py`): caches, compile, logprobs,
sampling statistics, scale 1, stops, streams, batches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from decodekit_guidance.strategy import cfg

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

PROMPTS = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12]]
NEGATIVES = [[20, 21, 22], [30, 31, 32, 33, 34, 35, 36, 37], [38]]
NEW = 16


@pytest.mark.parametrize("cache", ["dense", "gqa", "int8", "none"])
@pytest.mark.parametrize("negatives", [None, NEGATIVES], ids=["last-token", "negative"])
def test_greedy_equals_each_stream_alone_through_every_cache_that_keeps_each_token(
    model: TinyLM, reference_greedy: Callable[..., Any], cache: str, negatives: list[list[int]] | None
) -> None:
    out = cfg(model, PROMPTS, scale=2.5, negative=negatives, chain="greedy", max_new_tokens=NEW, cache=cache)
    for b, prompt in enumerate(PROMPTS):
        negative = None if negatives is None else negatives[b]
        assert out.tokens[b] == reference_greedy(model, prompt, negative, 2.5, NEW, cache), f"row {b}"
    plain = dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW, cache=cache)
    assert out.tokens != plain.tokens  # guidance changed the tokens: the comparison can fail


@pytest.mark.parametrize("cache", ["window(size=4, sinks=1, slack=3)", "h2o(budget=8, sinks=2, recent=2, slack=3)"])
def test_greedy_equals_each_stream_alone_through_a_cache_that_evicts(
    model: TinyLM, reference_greedy: Callable[..., Any], cache: str
) -> None:
    """docs/strategies.md: a pair of streams of different lengths, padded to each other, is evicted as each alone
    (the docs said until 2026-12-07 that window guides exactly only until it evicts)."""
    out = cfg(model, PROMPTS, scale=2.5, negative=NEGATIVES, chain="greedy", max_new_tokens=NEW, cache=cache)
    for b, prompt in enumerate(PROMPTS):
        assert out.tokens[b] == reference_greedy(model, prompt, NEGATIVES[b], 2.5, NEW, cache), f"row {b}"
    kept_all = cfg(model, PROMPTS, scale=2.5, negative=NEGATIVES, chain="greedy", max_new_tokens=NEW)
    assert out.tokens != kept_all.tokens  # it evicted what mattered: the comparison can fail


def test_an_evicting_cache_that_evicts_nothing_gives_the_same_tokens(model: TinyLM) -> None:
    want = cfg(model, PROMPTS, scale=2.5, negative=NEGATIVES, chain="greedy", max_new_tokens=NEW)
    got = cfg(
        model, PROMPTS, scale=2.5, negative=NEGATIVES, chain="greedy", max_new_tokens=NEW, cache="window(size=64)"
    )
    assert got.tokens == want.tokens


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
def test_compile_gives_eager_tokens(model: TinyLM) -> None:
    options = dict(scale=2.0, negative=NEGATIVES, chain="temperature(0.8) | top_k(8)", max_new_tokens=8, seed=[1, 2, 3])
    eager = cfg(model, PROMPTS, **options)  # type: ignore[arg-type]
    assert cfg(model, PROMPTS, compile=True, **options).tokens == eager.tokens  # type: ignore[arg-type]


def test_scale_one_is_sample(model: TinyLM) -> None:
    """transformers adds no processor at guidance_scale=1: the chain sees the model's logits, tokens and logprobs
    are `dk.generate`'s (a negative prompt changes nothing)."""
    options = dict(
        chain="repetition_penalty(1.3) | temperature(0.9) | top_p(0.9)", max_new_tokens=NEW, seed=5, logprobs=2
    )
    plain = dk.generate(model, PROMPTS, **options)  # type: ignore[arg-type]
    out = cfg(model, PROMPTS, scale=1.0, negative=NEGATIVES, **options)  # type: ignore[arg-type]
    assert out.tokens == plain.tokens and out.logprobs == plain.logprobs


def test_logprobs_raw_is_the_conditional_model_processed_the_chain_on_the_guided_scores(
    model: TinyLM, reference_first_step: Callable[..., Any]
) -> None:
    def first_token(logprobs: int) -> Any:
        return cfg(
            model,
            PROMPTS[:1],
            scale=3.0,
            negative=NEGATIVES[0],
            chain="temperature(0.5)",
            max_new_tokens=1,
            seed=0,
            logprobs=logprobs,
        )

    out = first_token(3)
    [lp] = out.logprobs[0]  # type: ignore[index]
    token = out.tokens[0][0]
    cond, guided = reference_first_step(model, PROMPTS[0], NEGATIVES[0], 3.0)
    processed = torch.log_softmax(guided / 0.5, -1)
    assert lp.raw == pytest.approx(float(cond[token]), abs=1e-5)
    assert lp.processed == pytest.approx(float(processed[token]), abs=1e-5)
    assert [i for i, _ in lp.raw_top] == cond.topk(3).indices.tolist()
    assert [i for i, _ in lp.processed_top] == processed.topk(3).indices.tolist()
    assert lp.raw_top[0][1] == pytest.approx(float(cond.max()), abs=1e-5)
    assert abs(lp.raw - lp.processed) > 0.01  # the two differ here
    bare = first_token(0)
    [lp0] = bare.logprobs[0]  # type: ignore[index]
    assert (lp0.raw, lp0.processed, lp0.raw_top, lp0.processed_top) == (lp.raw, lp.processed, [], [])


def test_samples_follow_the_guided_distribution(model: TinyLM, reference_first_step: Callable[..., Any]) -> None:
    """4,000 draws of the first token (one seed per row, fixed) against softmax(top_k(guided / T)) computed by
    hand: every frequency within 5 standard errors; the unguided distribution fails the same bound."""
    N, scale = 4000, 3.0
    chain = "temperature(0.8) | top_k(12)"
    out = cfg(
        model, [PROMPTS[0]] * N, scale=scale, negative=NEGATIVES[0], chain=chain, max_new_tokens=1, seed=list(range(N))
    )
    counts = torch.bincount(torch.tensor([t[0] for t in out.tokens]), minlength=model.spec.vocab_size).double()
    cond, guided = reference_first_step(model, PROMPTS[0], NEGATIVES[0], scale)

    def distribution(scores: torch.Tensor) -> torch.Tensor:
        x = scores / 0.8
        kept = x >= x.topk(12).values[-1]
        return torch.softmax(x.masked_fill(~kept, float("-inf")), -1).double()

    def within(p: torch.Tensor) -> bool:
        bound = 5 * (p * (1 - p) / N).sqrt() + 1 / N
        return bool(((counts / N - p).abs() <= bound).all())

    assert within(distribution(guided))
    assert not within(distribution(cond))


def test_a_prompts_tokens_do_not_depend_on_its_batch(model: TinyLM) -> None:
    options = dict(scale=2.0, chain="temperature(0.9)", max_new_tokens=NEW, seed=[7, 8, 9])
    out = cfg(model, PROMPTS, negative=NEGATIVES, **options)  # type: ignore[arg-type]
    alone = cfg(model, PROMPTS[1:2], negative=NEGATIVES[1:2], **{**options, "seed": [8]})  # type: ignore[arg-type]
    assert alone.tokens == out.tokens[1:2]


def test_stop_tokens_and_strings_end_the_pair_and_the_stream_equals_the_result(model: TinyLM) -> None:
    free = cfg(model, PROMPTS, scale=2.0, chain="greedy", max_new_tokens=NEW)
    stop = free.tokens[0][3]
    out = cfg(model, PROMPTS, scale=2.0, chain="greedy", max_new_tokens=NEW, stop_tokens=[stop])
    assert out.tokens[0] == free.tokens[0][: free.tokens[0].index(stop) + 1] and out.stopped_by[0] == stop
    text = model.tokenizer.decode(free.tokens[2][4:6])  # type: ignore[union-attr,operator]
    events = dk.stream(
        model, PROMPTS, strategy="cfg(scale=2.0)", chain="greedy", max_new_tokens=NEW, stop_strings=[text]
    )
    texts = [""] * len(PROMPTS)
    for event in events:
        texts[event.row] += event.text or ""
    assert events.result is not None and texts == events.result.text
    assert events.result.stopped_by[2] == text and events.result.finish_reasons[2] == "stop"


def test_validate_runs_the_checks_without_the_model(model: TinyLM) -> None:
    request = dk.validate(model, PROMPTS, strategy="cfg", negative=NEGATIVES, max_new_tokens=8)
    assert request.cache is not None  # the caller's request, with its cache
    with pytest.raises(dk.ContextLengthError, match=r"exceeds the model's context of 96"):
        dk.validate(model, PROMPTS, strategy="cfg", negative=[1] * 90, max_new_tokens=8)


@pytest.mark.parametrize("negative", [[1] * 90, [[1] * 90, [2, 3]]], ids=["one for all", "one each"])
def test_a_negative_prompt_past_the_context_is_named(model: TinyLM, negative: Any) -> None:
    """The pairs decode each negative prompt beside its prompt: one too long is named, not called the prompt."""
    name = "negative" if isinstance(negative[0], int) else r"negative\[0\]"
    match = rf"strategy cfg: {name} of 90 tokens \(its prompt: 3\) \+ max_new_tokens=8 = 98 tokens exceeds the model's"
    with pytest.raises(dk.ContextLengthError, match=match):
        dk.validate(model, [[1, 2, 3], [4, 5]], strategy="cfg", negative=negative, max_new_tokens=8)
    with pytest.raises(dk.ContextLengthError, match=match):
        cfg(model, [[1, 2, 3], [4, 5]], negative=negative, max_new_tokens=8)


def test_a_tokens_rank_is_its_rank_under_the_conditional_model(model: TinyLM) -> None:
    """`raw` and `raw_top` were the conditional model's, but `rank` the guided scores' (seed 2: ranks 4 and 31
    where the model gives 8 and 24): each generated token's rank is the one its prompt logprobs give after the
    prompt and the tokens before it, under the model alone."""
    options: dict[str, Any] = {"chain": "temperature(1.5)", "max_new_tokens": 8, "seed": 2, "logprobs": 0}
    out = cfg(model, PROMPTS[:1], scale=3.0, negative=NEGATIVES[0], **options)
    tokens = out.tokens[0]
    scored = dk.generate(model, [PROMPTS[0] + tokens], max_new_tokens=1, prompt_logprobs=0, cache="none")
    assert scored.prompt_logprobs is not None and out.logprobs is not None
    prompt_scores = scored.prompt_logprobs[0][len(PROMPTS[0]) :]  # each set: a prompt's first token alone has none
    under_model = [p.rank for p in prompt_scores]  # type: ignore[union-attr]
    assert [lp.rank for lp in out.logprobs[0]] == under_model
    logprobs = [p.logprob for p in prompt_scores]  # type: ignore[union-attr]
    assert [lp.raw for lp in out.logprobs[0]] == pytest.approx(logprobs, abs=1e-5)

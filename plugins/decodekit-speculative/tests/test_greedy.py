"""Greedy chains: token for token the output of `dk.generate`, with every draft, batch shape and cache."""

from __future__ import annotations

from typing import Any

import pytest
from decodekit_cache_scored.cache import ScoredCache
from decodekit_cache_window import WindowCache
from decodekit_gpt.gpt import GPT
from decodekit_speculative.strategy import SpeculativeGeneration, speculative

import decodekit as dk
from decodekit.cache import Croppable, PreallocatedKVCache, RowCroppable

# Ragged rows; the third repeats itself, so prompt lookup has something to find.
PROMPTS = [[5, 17, 3, 9, 44, 2], [7], [90, 1, 33, 4, 90, 1, 33, 4, 90, 1]]
CHAINS = [
    "greedy",
    "repetition_penalty(1.3) | no_repeat_ngram(3) | greedy",
    "min_new_tokens(5, stop_tokens=[0, 1]) | greedy",
]


def crop_backends() -> list[str]:
    """Every installed cache backend whose caches can crop (what rolling back rejected drafts needs);
    a backend that needs parameters to be built is left out (its own tests build it)."""
    spec = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, batch_size=1, capacity=4)
    names = []
    for name in sorted(dk.get_registry().caches):
        try:
            cache = dk.create_cache(name, spec)
        except dk.DecodekitError:
            continue
        if callable(getattr(cache, "crop", None)):
            names.append(name)
    return names


def test_backends_found() -> None:
    assert {"dense", "gqa"} <= set(crop_backends())


@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("which", ["model", "ngram", "itself"])
def test_equals_generate(target: GPT, draft: GPT, chain: str, which: str) -> None:
    drafts: dict[str, Any] = {"model": draft, "ngram": "ngram", "itself": target}
    ref = dk.generate(target, PROMPTS, chain=chain, max_new_tokens=20)
    for k in (1, 3, 8):
        out = dk.decode(
            target, PROMPTS, strategy="speculative", draft=drafts[which], k=k, chain=chain, max_new_tokens=20
        )
        assert out.tokens == ref.tokens, f"k={k}"
        alone = [
            speculative(target, [p], draft=drafts[which], k=k, chain=chain, max_new_tokens=20).tokens[0]
            for p in PROMPTS
        ]
        assert alone == ref.tokens
    if which == "itself":  # a draft that is the target is always right
        assert isinstance(out, SpeculativeGeneration) and out.accepted == out.drafted


@pytest.mark.parametrize("cache", crop_backends())
def test_every_crop_backend(target: GPT, draft: GPT, cache: str) -> None:
    chain = CHAINS[1]
    ref = dk.generate(target, PROMPTS, chain=chain, max_new_tokens=24, cache=cache)
    for d in (draft, "ngram"):
        out = speculative(target, PROMPTS, draft=d, k=4, chain=chain, max_new_tokens=24, cache=cache)
        assert out.tokens == ref.tokens


def test_rows_advance_unevenly(target: GPT, draft: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched case really moves rows by different amounts (so the test above exercises crop_rows)."""
    calls: list[tuple[list[int], int]] = []
    original = PreallocatedKVCache.crop_rows

    def spy(self: PreallocatedKVCache, ends: list[int], length: int) -> None:
        calls.append((list(ends), length))
        original(self, ends, length)

    monkeypatch.setattr(PreallocatedKVCache, "crop_rows", spy)
    out = speculative(target, PROMPTS, draft=draft, k=4, chain="greedy", max_new_tokens=24)
    assert out.tokens == dk.generate(target, PROMPTS, chain="greedy", max_new_tokens=24).tokens
    assert any(len(set(ends)) > 1 for ends, _ in calls)
    assert len(set(out.accepted)) > 1


class CropOnly(PreallocatedKVCache):
    """A cache backend that can crop but not crop rows: the strategy then decodes rows one by one. Its methods
    are its class's: from Python 3.12, isinstance against a Protocol does not see those a `__getattr__` hands out
    (a wrapper that forwarded to a dense cache was refused there: "cache crop_only cannot be used")."""

    crop_rows = None  # type: ignore[assignment]  # a member set to None: not RowCroppable, on every Python


def test_crop_only_can_crop_but_not_crop_rows() -> None:
    cache = CropOnly(dk.CacheSpec(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=2, batch_size=1, capacity=4))
    assert isinstance(cache, Croppable) and not isinstance(cache, RowCroppable)


def test_cache_without_crop_rows(target: GPT, draft: GPT) -> None:
    class Plugin:
        @dk.hookimpl
        def register_cache_backends(self, register: Any) -> None:
            register("crop_only", CropOnly)

    plugin = Plugin()
    dk.register_plugin(plugin)
    try:
        out = speculative(target, PROMPTS, draft=draft, k=3, chain="greedy", max_new_tokens=16, cache="crop_only")
    finally:
        dk.unregister_plugin(plugin)
    assert out.tokens == dk.generate(target, PROMPTS, chain="greedy", max_new_tokens=16).tokens


def test_stops_as_generate(target: GPT, draft: GPT) -> None:
    ref = dk.generate(target, PROMPTS, chain="greedy", max_new_tokens=30)
    stop = ref.tokens[0][7]  # a token row 0 emits mid-way, inside some round
    ref = dk.generate(target, PROMPTS, chain="greedy", max_new_tokens=30, stop_tokens=[stop])
    out = speculative(target, PROMPTS, draft=draft, k=5, chain="greedy", max_new_tokens=30, stop_tokens=[stop])
    assert (out.tokens, out.finish_reasons, out.stopped_by) == (ref.tokens, ref.finish_reasons, ref.stopped_by)
    assert "stop" in out.finish_reasons


def test_rope_models(rope_pair: tuple[GPT, GPT]) -> None:
    rope, rope_draft = rope_pair
    ref = dk.generate(rope, PROMPTS, chain="greedy", max_new_tokens=20)
    out = speculative(rope, PROMPTS, draft=rope_draft, k=4, chain="greedy", max_new_tokens=20)
    assert out.tokens == ref.tokens


def test_text_and_stop_strings_on_tiny_shakespeare() -> None:
    model, draft = dk.load_model("tiny-shakespeare"), dk.load_model("tiny-shakespeare-draft")
    prompts = ["ROMEO:\n", "JULIET:\nO Romeo"]
    for stops in ((), ("\n\n", "the")):
        ref = dk.generate(model, prompts, chain="greedy", max_new_tokens=60, stop_strings=stops)
        out = speculative(model, prompts, draft=draft, k=4, chain="greedy", max_new_tokens=60, stop_strings=stops)
        assert (out.text, out.tokens, out.finish_reasons, out.stopped_by) == (
            ref.text,
            ref.tokens,
            ref.finish_reasons,
            ref.stopped_by,
        )
    assert "the" in ref.stopped_by and (out.acceptance_rate or 0.0) > 0.5


@pytest.mark.parametrize(
    ("prompts", "new_tokens"),
    [
        ([[1], [2], [3]], 1),  # one-token prompts, one new token: no room to draft
        ([[5] * 10, [7]], 54),  # prompt + new tokens fill the context to its last position
        ([[5] * 60, [7, 8]], 4),
    ],
)
def test_edges(target: GPT, draft: GPT, prompts: list[list[int]], new_tokens: int) -> None:
    chain = "repetition_penalty(1.3) | greedy"
    ref = dk.generate(target, prompts, chain=chain, max_new_tokens=new_tokens)
    for d in (draft, "ngram", target):
        for k in (1, 64):  # k = 64: more than the tokens left and than the context's room
            assert (
                speculative(target, prompts, draft=d, k=k, chain=chain, max_new_tokens=new_tokens).tokens == ref.tokens
            )


@pytest.mark.parametrize("cache", ["window(size=8, sinks=2)", 'window(size="auto", sinks=2)'])
def test_a_draft_that_needs_every_token_under_an_evicting_target_cache(
    rope_pair: tuple[GPT, GPT], cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The draft keeps every token (gqa) when the target's cache evicts: a recurrent draft's state cannot be
    evicted (it refuses such a cache), it has no calibration for "auto", and the output is the target's."""
    lstm = pytest.importorskip("decodekit_shakespeare.lstm")
    target = rope_pair[0]
    monkeypatch.setattr(target, "attention_windows", (8, 6), raising=False)  # a calibration, for "auto"
    draft = lstm.LSTMModel(lstm.LSTMConfig(vocab_size=101, block_size=64, n_embd=16, n_input=8)).eval()
    ref = dk.generate(target, PROMPTS, chain="greedy", max_new_tokens=20, cache=cache)
    out = speculative(target, PROMPTS, draft=draft, k=3, chain="greedy", max_new_tokens=20, cache=cache)
    assert out.tokens == ref.tokens
    assert sum(out.drafted) > 0


@pytest.mark.parametrize("cache", ["h2o(budget=24, slack=8)", "snapkv(budget=24, slack=8)", "window(size=16, sinks=2)"])
def test_a_prompt_longer_than_the_context_through_an_evicting_cache(rope_pair: tuple[GPT, GPT], cache: str) -> None:
    """Before: the first round fed the whole prompt and its drafts in one forward, so a scored cache refused a
    prompt longer than the model's context ("a forward of 153 tokens is invalid ... the engine prefills in
    such blocks"), for the target and for a draft model alike. Now the history goes in blocks of the context."""
    rope, rope_draft = rope_pair
    prompts = [[(7 * i) % 101 for i in range(150)], [5, 6, 7]]  # 150 tokens: past the 64-position context
    ref = dk.generate(rope, prompts, chain="greedy", max_new_tokens=20, cache=cache)
    for d in ("ngram", rope_draft):
        out = speculative(rope, prompts, draft=d, k=3, chain="greedy", max_new_tokens=20, cache=cache)
        assert [len(t) for t in out.tokens] == [20, 20]
        if cache.startswith("window"):  # a block is attended as one token at a time: generate's tokens
            assert out.tokens == ref.tokens


def test_drafted_and_accepted_count_up_to_the_rows_stop(target: GPT) -> None:
    """Before: a row that stopped mid-round still counted the drafts past its stop (row 1 below: 6 drafted, 6
    accepted; row 2: 6 and 6), and an n-gram row stopped by the target's first token counted 3 drafts, not 1."""
    chain, stops = "no_repeat_ngram(2) | greedy", [60, 69]
    prompts = [[5, 17, 3, 9, 44, 2], [7], [90, 1, 33, 4, 90, 1, 33, 4, 90, 1]]
    ref = dk.generate(target, prompts, chain=chain, max_new_tokens=12, stop_tokens=stops)
    assert ref.tokens == [  # the premise: where each row stops
        [2, 25, 25, 20, 20, 25, 90, 90, 20, 39, 39, 1],  # no stop: 12 tokens
        [7, 21, 21, 51, 51, 60],  # 60: token 6
        [1, 35, 35, 1, 69],  # 69: token 5
    ]
    # The target as its own draft accepts every draft: a round is 3 drafts and the target's token (4 tokens).
    # Row 0: three rounds, 3 drafts each. Row 1 stops at the 2nd draft of round 2: 3 + 2. Row 2 at its 1st: 3 + 1.
    out = speculative(target, prompts, draft=target, k=3, chain=chain, max_new_tokens=12, stop_tokens=stops)
    assert out.tokens == ref.tokens
    assert (out.drafted, out.accepted) == ([9, 5, 4], [9, 5, 4])
    # The round a row stops in counts once, and its positions up to the stop: row 1 kept drafts 1-2 of round 2.
    assert out.draft_rounds == [3, 2, 2]
    assert out.accepted_by_position == [[3, 3, 3], [2, 2, 1], [2, 1, 1]]
    # Prompt lookup proposes what followed the last 3 tokens (4, 90, 1) earlier: 33, 4, 90; the target rejects 33
    # and emits 1, a stop token: one draft counted (at the stop), none accepted.
    out = speculative(target, prompts[2:], draft="ngram", k=3, chain=chain, max_new_tokens=12, stop_tokens=[1])
    assert (out.tokens, out.drafted, out.accepted) == ([[1]], [1], [0])


def test_a_row_that_goes_on_counts_every_draft_it_rejected(target: GPT, wrong_draft: GPT) -> None:
    """A draft that is always wrong: each round is one token of the target's, and every draft counts (the count
    up to a row's stop must not cut the drafts of a round the row goes on past: 7 before, one per round)."""
    chain, prompts = "no_repeat_ngram(2) | greedy", [[5, 17, 3, 9, 44, 2]]
    out = speculative(target, prompts, draft=wrong_draft, k=3, chain=chain, max_new_tokens=8)
    assert out.tokens == dk.generate(target, prompts, chain=chain, max_new_tokens=8).tokens
    assert out.accepted == [0]  # the premise: 8 rounds of one token each
    # Round g (g tokens done) drafts min(k, 8 - g - 1): 3, 3, 3, 3, 3, 2, 1, 0.
    assert out.drafted == [18]


def crop_rows_calls(monkeypatch: pytest.MonkeyPatch, cls: Any) -> list[list[int]]:
    """The `ends` of every call of `cls.crop_rows` from now on."""
    calls: list[list[int]] = []
    original = cls.crop_rows

    def spy(self: Any, ends: list[int], length: int) -> None:
        calls.append(list(ends))
        original(self, ends, length)

    monkeypatch.setattr(cls, "crop_rows", spy)
    return calls


@pytest.mark.parametrize("chain", [CHAINS[1], "top_k(20) | temperature(0.9)"])
def test_a_window_batch_is_verified_in_one_forward(
    rope_pair: tuple[GPT, GPT], chain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `window` had no crop_rows, so speculation decoded a batch one row at a time. Now a round verifies the
    ragged batch in one forward, its rows taken back by different amounts, well past eviction (40 tokens through a
    window of 8 + 2 sinks): each row's tokens alone, greedy and seeded, with a draft model (which shares the
    window) and prompt lookup; greedy (penalised: plain greedy repeats one token here), also plain decoding's."""
    target, rope_draft = rope_pair
    calls = crop_rows_calls(monkeypatch, WindowCache)
    seeds = [1, 2, 3]
    options: dict[str, Any] = {"chain": chain, "max_new_tokens": 40, "cache": "window(size=8, sinks=2)"}
    ref = dk.generate(target, PROMPTS, seed=seeds, stop_tokens=[], **options)
    for d in (rope_draft, "ngram"):
        out = speculative(target, PROMPTS, draft=d, k=4, seed=seeds, stop_tokens=[], **options)
        alone = [
            speculative(target, [p], draft=d, k=4, seed=[s], stop_tokens=[], **options).tokens[0]
            for p, s in zip(PROMPTS, seeds)
        ]
        assert out.tokens == alone, d
        if chain == CHAINS[1]:
            assert out.tokens == ref.tokens
        assert isinstance(out, SpeculativeGeneration) and (d == "ngram" or len(set(out.accepted)) > 1)
    assert any(len(set(ends)) > 1 for ends in calls)


SCORED = ["h2o(budget=8, sinks=2, recent=2, slack=5)", "snapkv(budget=8, sinks=2, recent=2, slack=5, window=4)"]


@pytest.mark.parametrize("cache", SCORED)
@pytest.mark.parametrize("chain", [CHAINS[1], "top_k(20) | temperature(0.9)"])
@pytest.mark.parametrize("k", [4, 1])
def test_a_scored_batch_is_verified_in_one_forward(
    rope_pair: tuple[GPT, GPT], cache: str, chain: str, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the scored caches had no crop_rows, so speculation decoded their batches one row at a time. Now a round
    verifies the ragged batch in one forward, well past eviction (40 tokens through 8 entries), the draft sharing the
    backend: each row's tokens alone, greedy and seeded. k = 1: the draft's prompt, not compressed yet, is taken back
    unevenly (its first round is one forward)."""
    target, rope_draft = rope_pair
    calls = crop_rows_calls(monkeypatch, ScoredCache)
    seeds = [1, 2, 3]
    options: dict[str, Any] = {"chain": chain, "max_new_tokens": 40, "cache": cache, "k": k, "stop_tokens": []}
    out = speculative(target, PROMPTS, draft=rope_draft, seed=seeds, **options)
    alone = [speculative(target, [p], draft=rope_draft, seed=[s], **options).tokens[0] for p, s in zip(PROMPTS, seeds)]
    assert out.tokens == alone
    assert isinstance(out, SpeculativeGeneration) and len(set(out.accepted)) > 1
    assert any(len(set(ends)) > 1 for ends in calls)


@pytest.mark.parametrize("cache", ["window(size=8, sinks=2, slack=5)", *SCORED])
@pytest.mark.parametrize("k", [1, 3])
def test_a_batch_whose_longer_prompt_ends_first_goes_on_alone(rope_pair: tuple[GPT, GPT], cache: str, k: int) -> None:
    """Before: ParameterError "crop_rows: ends=[0, 1], length=0 are invalid: row 0 keeps its 3 tokens (slots -3..-1)".
    The row that ended is left out of the next round, fed junk at its last position; where that was a first forward
    (the other row's one-token prompt is fed apart), its start fell before slot 0 and it seemed to keep tokens."""
    target, rope_draft = rope_pair
    prompts, limits, seeds = [[5, 17, 3, 9, 44], [7]], [1, 12], [1, 2]
    options: dict[str, Any] = {"chain": "top_k(20) | temperature(0.9)", "cache": cache, "k": k, "stop_tokens": []}
    out = speculative(target, prompts, draft=rope_draft, max_new_tokens=limits, seed=seeds, **options)
    alone = [
        speculative(target, [p], draft=rope_draft, max_new_tokens=n, seed=[s], **options).tokens[0]
        for p, n, s in zip(prompts, limits, seeds)
    ]
    assert out.tokens == alone

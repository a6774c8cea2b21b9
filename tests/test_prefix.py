"""Prefixes a batch's prompts share are prefilled once (`decodekit.prefix`): one forward of every group's prefix, one
of the rows' suffixes, then each row moved to end at the prompts' last column; every result equals the decode that
prefills each whole prompt (the engine with the sharing turned off), and each prompt decoded alone."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from decodekit_gpt.gpt import GPT
from test_prompt_logprobs import assert_same as assert_same_scores

import decodekit as dk
import decodekit.engine
import decodekit.prefix
from decodekit.prefix import MIN_SAVED, Groups, shared_prefixes
from tinymodels import tiny_gpt

RNG = random.Random(0)
PREFIX = [RNG.randrange(1, 101) for _ in range(40)]  # 40 tokens shared by 4 rows: 120 saved, past MIN_SAVED
SUFFIXES = [[7, 3, 9], [8, 1, 1, 5, 60, 2, 9, 4, 4], [9], [11, 12, 13, 14, 15]]  # ragged: 1 to 9 tokens
PROMPTS = [PREFIX + s for s in SUFFIXES]
CACHES = ["dense", "gqa", "int8"]
# An evaluation's batch: 3 questions, contexts of 30, 38 and 45 tokens, each before 4 choices of 1-4 tokens, in the
# order a harness sorting by length might give them (a question's choices apart). Prefilled as 3 prefixes of up to
# 45 tokens, left-padded, then 12 suffixes of up to 4: each question's context saves 3 rows of 45 tokens.
CONTEXTS = [[b + 1, *(RNG.randrange(1, 101) for _ in range(n - 1))] for b, n in enumerate((30, 38, 45))]
CHOICES = [[7], [8, 1], [9, 2, 3], [10, 4, 5, 6]]
QUESTIONS = [c + choice for choice in CHOICES for c in CONTEXTS]
# Two few-shot blocks (26 and 34 tokens), 4 questions of 3-9 tokens after each: 2 prefixes, 8 suffixes.
BLOCKS = [[50 + b, *(RNG.randrange(1, 101) for _ in range(n - 1))] for b, n in enumerate((26, 34))]
ASKED = [[11, 3, 5], [12, *range(20, 28)], [13, 1, 1, 1, 1], [14, 9, 9, 9, 9, 9, 9]]
FEW_SHOT = [block + q for block in BLOCKS for q in ASKED]


@pytest.fixture(scope="module")
def gpt() -> GPT:
    return tiny_gpt(2, block_size=128)


def _forwards(model: Any, call: Any) -> tuple[Any, list[tuple[int, int]]]:
    """`call()`'s result and the `[rows, tokens]` of each forward it made."""
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        return call(), shapes
    finally:
        hook.remove()


def _unshared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decodekit.engine, "shared_prefixes", lambda kv, prompts: None)


def assert_same(shared: dk.Generation, unshared: dk.Generation, tol: float = 1e-5) -> None:
    """Tokens equal; logprobs and prompt logprobs (ranks and top ids too) within `tol`."""
    assert shared.tokens == unshared.tokens
    assert shared.finish_reasons == unshared.finish_reasons
    for mine, theirs in zip(shared.logprobs or [], unshared.logprobs or []):
        assert [lp.raw for lp in mine] == pytest.approx([lp.raw for lp in theirs], abs=tol)
    assert (shared.prompt_logprobs is None) == (unshared.prompt_logprobs is None)
    for mine_p, theirs_p in zip(shared.prompt_logprobs or [], unshared.prompt_logprobs or []):
        assert_same_scores(mine_p, theirs_p, tol)


def test_a_model_whose_forwards_extent_changes_its_logits_gets_each_prompt_whole(
    gpt: GPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ModelSpec.splittable=False` (transformers' longrope picks its frequencies by a forward's largest position):
    no prefix is shared, each prompt goes whole in one forward; its results are the unshared prefill's."""
    options: dict[str, Any] = {"max_new_tokens": 4, "prompt_logprobs": 1, "seed": [1, 2, 3, 4]}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, PROMPTS, **options))
    assert shapes[0] == (1, 40)
    spec = type(gpt).spec.fget  # type: ignore[attr-defined]
    monkeypatch.setattr(type(gpt), "spec", property(lambda self: dataclasses.replace(spec(self), splittable=False)))
    whole, shapes = _forwards(gpt, lambda: dk.generate(gpt, PROMPTS, **options))
    assert shapes[0] == (4, 49)
    assert_same(shared, whole)


@pytest.mark.parametrize("cache", CACHES)
def test_a_shared_prefix_is_prefilled_once_and_decodes_as_every_row_computed(
    gpt: GPT, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against two other implementations: the unshared prefill, and each prompt alone. Each row's next token is its
    own suffix's last column, and its cache row is moved to end with the prompts: without either (the forward's last
    column read, `crop_rows` skipped), the rows sample other tokens."""
    options: dict[str, Any] = {"max_new_tokens": 10, "seed": [1, 2, 3, 4], "cache": cache, "logprobs": 2}
    options["prompt_logprobs"] = 2
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, PROMPTS, **options))
    assert shapes[:3] == [(1, 40), (4, 9), (4, 1)]  # the prefix once, the suffixes right-padded, then the steps
    _unshared(monkeypatch)
    unshared, shapes = _forwards(gpt, lambda: dk.generate(gpt, PROMPTS, **options))
    assert shapes[0] == (4, 49)
    assert_same(shared, unshared)
    for b, prompt in enumerate(PROMPTS):  # each row as its prompt alone with its seed
        alone = dk.generate(gpt, [prompt], **{**options, "seed": [b + 1]})
        assert alone.tokens[0] == shared.tokens[b]


def test_copies_of_prompts_sharing_a_prefix_stay_one_row(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples of each prompt (`n` copies) and a prompt given twice: the suffix forward computes the distinct ones."""
    prompts = [p for p in PROMPTS for _ in range(3)] + [PROMPTS[1]]
    options: dict[str, Any] = {"max_new_tokens": 8, "seed": list(range(13)), "logprobs": 1, "prompt_logprobs": 0}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert shapes[:3] == [(1, 40), (4, 9), (13, 1)]
    _unshared(monkeypatch)
    assert_same(shared, dk.generate(gpt, prompts, **options))


def test_beams_of_prompts_sharing_a_prefix(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    options: dict[str, Any] = {"strategy": "beam(num_beams=3, num_return_sequences=2)", "max_new_tokens": 8}
    options["prompt_logprobs"] = 1
    shared, shapes = _forwards(gpt, lambda: dk.decode(gpt, PROMPTS, **options))
    assert shapes[:2] == [(1, 40), (4, 9)]
    _unshared(monkeypatch)
    unshared = dk.decode(gpt, PROMPTS, **options)
    assert_same(shared, unshared)
    assert shared.sequences == unshared.sequences  # type: ignore[attr-defined]
    for mine, theirs in zip(shared.scores, unshared.scores):  # type: ignore[attr-defined]
        assert mine == pytest.approx(theirs, abs=1e-5)


def test_loglikelihood_lines_score_as_every_row_computed(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation's lines: context + continuation, `max_new_tokens=0`, `prompt_logprobs=0`."""
    options: dict[str, Any] = {"max_new_tokens": 0, "prompt_logprobs": 0}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, PROMPTS, **options))
    assert shapes == [(1, 40), (4, 9)]
    _unshared(monkeypatch)
    assert_same(shared, dk.generate(gpt, PROMPTS, **options))


def test_a_prompt_that_is_the_prefix_keeps_its_last_token(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt the others extend: the prefix stops a token short of it, so its next token is a suffix's column."""
    prompts = [PREFIX, *PROMPTS]
    options: dict[str, Any] = {"max_new_tokens": 6, "chain": "greedy", "logprobs": 1, "prompt_logprobs": 1}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert shapes[:2] == [(1, 39), (5, 10)]
    _unshared(monkeypatch)
    assert_same(shared, dk.generate(gpt, prompts, **options))


def test_rows_without_a_common_prefix_take_the_unshared_prefill_bit_for_bit(
    gpt: GPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three rows share the prefix, the fourth does not: one forward of every row, results exactly the unshared's."""
    prompts = [*PROMPTS[:3], [3, *PREFIX]]
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": [1, 2, 3, 4], "logprobs": 1, "prompt_logprobs": 1}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert shapes[0] == (4, 49)
    _unshared(monkeypatch)
    unshared = dk.generate(gpt, prompts, **options)
    assert shared.tokens == unshared.tokens and shared.logprobs == unshared.logprobs
    assert shared.prompt_logprobs == unshared.prompt_logprobs


@pytest.mark.parametrize("cache", ["window(size=16)", "h2o(budget=60)", "streaming(budget=60)", "none"])
def test_caches_that_evict_or_observe_or_none_prefill_every_row(gpt: GPT, cache: str) -> None:
    _, shapes = _forwards(gpt, lambda: dk.generate(gpt, PROMPTS, max_new_tokens=2, cache=cache, seed=0))
    assert shapes[0] == (4, 49)
    _, shapes = _forwards(gpt, lambda: dk.generate(gpt, QUESTIONS, max_new_tokens=2, cache=cache, seed=0))
    assert shapes[0] == (12, 49)


def _shared(kv: Any, prompts: list[Any]) -> int:
    """The prefix `shared_prefixes` finds every prompt shares (0: none), where it makes one group."""
    groups = shared_prefixes(kv, prompts)
    if groups is None:
        return 0
    assert groups.of == [0] * len(prompts)
    return groups.width


def test_the_rule_counts_the_tokens_saved(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-worked: prompts sharing 3 tokens, one of them shorter; the prefix saves 3 tokens per prompt but one."""
    kv = dk.create_cache("dense", dk.CacheSpec.for_model(gpt.spec, batch_size=3, capacity=8))
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 3, 4, 6]]
    monkeypatch.setattr(decodekit.prefix, "MIN_SAVED", 6)
    assert _shared(kv, prompts) == 3
    assert _shared(kv, [(1, 2, 3, 4, 5), [1, 2, 3, 4, 6], [1, 2, 3, 4, 7]]) == 4  # a tuple beside lists
    assert _shared(kv, [[1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 6]]) == 0  # the shortest keeps a token: 2 x 2
    monkeypatch.setattr(decodekit.prefix, "MIN_SAVED", 4)
    assert _shared(kv, [[1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 6]]) == 2
    monkeypatch.setattr(decodekit.prefix, "MIN_SAVED", 7)
    assert _shared(kv, prompts) == 0
    assert _shared(kv, [[1, 2], [3, 4]]) == 0
    assert _shared(None, prompts) == 0
    assert MIN_SAVED == 96  # docs/benchmarks.md measured it


def test_a_storage_without_take_slots_is_not_shared(gpt: GPT) -> None:
    kv = dk.create_cache("dense", dk.CacheSpec.for_model(gpt.spec, batch_size=4, capacity=64))
    assert _shared(kv, PROMPTS) == 40
    kv.store = object()  # type: ignore[attr-defined]  # crop_rows would refuse: no take_slots
    assert _shared(kv, PROMPTS) == 0


def test_without_prompt_logprobs_only_each_rows_last_column_is_projected(
    gpt: GPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unshared prefill asks the model for the last column's logits only; the suffixes end in columns of their
    own, so all but each row's last token go first, the rows are moved to end together, and the last tokens follow in
    one column: every forward asks for its last column only (a batch of long suffixes over a large vocabulary would
    otherwise project rows x columns x vocabulary logits, all but one a row thrown away)."""
    calls: list[tuple[tuple[int, int], bool]] = []
    hook = gpt.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append((tuple(args[0].shape), kwargs.get("last_only", False))),
        with_kwargs=True,
    )
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": [1, 2, 3, 4], "logprobs": 2}
    try:
        shared = dk.generate(gpt, PROMPTS, **options)
        scored = dk.generate(gpt, PROMPTS, **options, prompt_logprobs=0)
    finally:
        hook.remove()
    assert gpt.supports_last_only
    assert calls[:3] == [((1, 40), True), ((4, 8), True), ((4, 1), True)]  # suffixes of 3, 9, 1 and 5 tokens
    second = calls.index(((1, 40), False))  # the scored decode's first forward
    assert calls[second : second + 2] == [((1, 40), False), ((4, 9), False)]  # scored: every column is read
    _unshared(monkeypatch)
    assert_same(shared, dk.generate(gpt, PROMPTS, **options))
    assert_same(scored, dk.generate(gpt, PROMPTS, **options, prompt_logprobs=0))


def test_per_prompt_lengths_and_a_prefix_that_is_the_shortest_prompt_but_one_token(
    gpt: GPT, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`max_new_tokens` per prompt (0, and one that ends at the context) over prompts whose shortest keeps a single
    token of its own, beside a suffix of 60: the shared prefix is that prompt less its last token, and the long prompt
    a group of its own (its 98 first tokens beside the prefix, left-padded: 2 x 98 + 4 x 2 tokens fed, not 40 + 4 x
    60)."""
    prompts = [[*PREFIX, 5], [*PREFIX, 5, 6], [*PREFIX, *range(1, 61)], [*PREFIX, 9]]
    options: dict[str, Any] = {"max_new_tokens": [3, 0, 128 - 100, 7], "seed": [1, 2, 3, 4], "logprobs": 2}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, prompts, **options, prompt_logprobs=1))
    assert shapes[:2] == [(2, 98), (4, 2)]
    _unshared(monkeypatch)
    assert_same(shared, dk.generate(gpt, prompts, **options, prompt_logprobs=1))


def test_a_prefix_of_one_token_shared_by_a_hundred_prompts(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule's smallest prefix: 1 token x 99 prompts but one saves 99; the prefix's scores are then none."""
    rng = random.Random(1)
    prompts = [[7, b % 100 + 1, *(rng.randrange(1, 101) for _ in range(rng.randrange(0, 4)))] for b in range(100)]
    options: dict[str, Any] = {"max_new_tokens": 2, "chain": "greedy", "logprobs": 1, "prompt_logprobs": 1}
    shared, shapes = _forwards(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert shapes[:2] == [(1, 1), (100, 4)]
    _unshared(monkeypatch)
    assert_same(shared, dk.generate(gpt, prompts, **options))


def test_guidance_whose_negative_shares_the_prefix(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """cfg prefills the prompts and their negative in one batch: the negative's rows share the prefix too."""
    options: dict[str, Any] = {"strategy": "cfg", "scale": 1.5, "negative": [*PREFIX, 3], "max_new_tokens": 6}
    shared, shapes = _forwards(gpt, lambda: dk.decode(gpt, PROMPTS, chain="greedy", **options))
    assert shapes[0] == (1, 40)
    _unshared(monkeypatch)
    assert_same(shared, dk.decode(gpt, PROMPTS, chain="greedy", **options))


def test_the_suffixes_forward_projects_only_the_columns_it_keeps(gpt: GPT) -> None:
    """Without `prompt_logprobs` the unshared prefill projects one column per row; so does the shared one (before,
    every suffix column of every row: 8 rows of 50-200 suffix tokens after 400 shared, on a CPU, V=151936,
    n_embd=896, 6 layers: 7.1 s shared vs 9.7 s unshared; n_embd=32: 18x slower than unshared)."""
    columns: list[int] = []
    hook = gpt.register_forward_hook(lambda module, args, out: columns.append(out.shape[0] * out.shape[1]))
    try:
        dk.generate(gpt, PROMPTS, max_new_tokens=1, seed=0)
    finally:
        hook.remove()
    assert columns == [1, len(PROMPTS), len(PROMPTS)]  # the prefix's last column, then each row's, twice


def test_each_prompts_scores_of_the_shared_prefix_are_its_own(gpt: GPT) -> None:
    """Scored once, the prefix's entries are still each prompt's own objects, as the unshared prefill's are: a caller
    that edits one prompt's `top` list edits no other's."""
    out = dk.generate(gpt, PROMPTS, max_new_tokens=0, prompt_logprobs=2)
    assert out.prompt_logprobs is not None
    first, second = out.prompt_logprobs[0][5], out.prompt_logprobs[1][5]
    assert first is not None and second is not None
    assert first == second and first is not second
    first.top.append((0, 0.0))
    assert len(second.top) == 2


def _against_unshared_and_alone(
    gpt: GPT, monkeypatch: pytest.MonkeyPatch, prompts: list[list[int]], shapes: list[tuple[int, int]], **options: Any
) -> dk.Generation:
    """The grouped decode's first forwards are `shapes`; its results the unshared prefill's, and each row's tokens
    its prompt's alone with its seed (a seed per prompt)."""
    shared: dk.Generation
    shared, forwards = _forwards(gpt, lambda: dk.generate(gpt, prompts, **options))
    assert forwards[: len(shapes)] == shapes
    with monkeypatch.context() as patch:
        _unshared(patch)
        assert_same(shared, dk.generate(gpt, prompts, **options))
    for b, prompt in enumerate(prompts):
        seed = options.get("seed")
        limit = options.get("max_new_tokens", 16)
        mine = {
            "seed": None if seed is None else [seed[b]],
            "max_new_tokens": limit[b] if isinstance(limit, list) else limit,
        }
        alone = dk.generate(gpt, [prompt], **{**options, **mine})
        assert alone.tokens[0] == shared.tokens[b]
    return shared


@pytest.mark.parametrize("cache", CACHES)
def test_each_questions_context_is_prefilled_once(gpt: GPT, cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups whose prefixes differ in length: a row's prefix ends at the widest's column (left-padded), its suffix
    starts after it at its own positions, and `crop_rows` moves each row to end with the longest prompt."""
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": list(range(12)), "cache": cache, "logprobs": 2}
    _against_unshared_and_alone(gpt, monkeypatch, QUESTIONS, [(3, 45), (12, 4), (12, 1)], prompt_logprobs=2, **options)
    _against_unshared_and_alone(gpt, monkeypatch, QUESTIONS, [(3, 45), (12, 3), (12, 1), (12, 1)], **options)


def test_loglikelihood_lines_of_several_questions(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    shapes = [(3, 45), (12, 4)]
    out = _against_unshared_and_alone(gpt, monkeypatch, QUESTIONS, shapes, max_new_tokens=0, prompt_logprobs=0)
    assert out.prompt_logprobs is not None
    assert [len(p) for p in out.prompt_logprobs] == [len(q) for q in QUESTIONS]


def test_two_few_shot_blocks(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    options: dict[str, Any] = {"max_new_tokens": 8, "seed": list(range(8)), "logprobs": 1, "prompt_logprobs": 1}
    _against_unshared_and_alone(gpt, monkeypatch, FEW_SHOT, [(2, 34), (8, 9)], **options)


def test_some_prompts_grouped_and_others_alone(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt that shares nothing is a group of one: all its tokens but its last in the prefix forward, its last in
    the suffixes'. Two short ones that share nothing (sorted side by side) are a group whose prefix is empty: their
    whole prompts fit in the suffixes' 9 columns, from position 0, and spare a row of the prefix forward."""
    prompts = [[5], PROMPTS[0], [3, *range(30, 50)], *PROMPTS[1:], [4, 4, 4]]
    kv = dk.create_cache("dense", dk.CacheSpec.for_model(gpt.spec, batch_size=7, capacity=64))
    assert shared_prefixes(kv, prompts) == Groups(of=[0, 1, 2, 1, 1, 1, 0], firsts=[0, 1, 2], prefixes=[0, 40, 20])
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": list(range(7)), "logprobs": 1, "prompt_logprobs": 2}
    out = _against_unshared_and_alone(gpt, monkeypatch, prompts, [(3, 40), (7, 9)], **options)
    assert out.prompt_logprobs is not None and out.prompt_logprobs[0] == [None]


def test_copies_and_beams_of_grouped_prompts(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples of each question's choices and a line given twice: the suffix forward computes the distinct ones; the
    prefixes' forward writes each group's rows through the distinct prompts' copies."""
    prompts = [p for p in QUESTIONS for _ in range(2)] + [QUESTIONS[5]]
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": list(range(25)), "logprobs": 1, "prompt_logprobs": 1}
    _against_unshared_and_alone(gpt, monkeypatch, prompts, [(3, 45), (12, 4), (25, 1)], **options)
    beams: dict[str, Any] = {"strategy": "beam(num_beams=3, num_return_sequences=2)", "max_new_tokens": 6}
    shared, shapes = _forwards(gpt, lambda: dk.decode(gpt, FEW_SHOT, prompt_logprobs=1, **beams))
    assert shapes[:2] == [(2, 34), (8, 9)]
    _unshared(monkeypatch)
    unshared = dk.decode(gpt, FEW_SHOT, prompt_logprobs=1, **beams)
    assert_same(shared, unshared)
    assert shared.sequences == unshared.sequences  # type: ignore[attr-defined]


def test_guidance_and_per_prompt_limits_over_groups(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """cfg's negative is one more prompt (alone here); `max_new_tokens` per prompt, 0 and to the context."""
    guided: dict[str, Any] = {"strategy": "cfg", "scale": 1.5, "negative": [2, 2], "max_new_tokens": 6}
    shared, shapes = _forwards(gpt, lambda: dk.decode(gpt, FEW_SHOT, chain="greedy", **guided))
    assert shapes[0] == (3, 34)
    limits = [0, 3, 128 - 43, 5, 1, 2, 7, 4]
    options: dict[str, Any] = {"max_new_tokens": limits, "seed": list(range(8)), "logprobs": 2, "prompt_logprobs": 1}
    _against_unshared_and_alone(gpt, monkeypatch, FEW_SHOT, [(2, 34), (8, 9)], **options)
    _unshared(monkeypatch)
    assert_same(shared, dk.decode(gpt, FEW_SHOT, chain="greedy", **guided))


def test_each_prompts_scores_of_its_groups_prefix_are_its_own(gpt: GPT) -> None:
    out = dk.generate(gpt, QUESTIONS, max_new_tokens=0, prompt_logprobs=2)
    assert out.prompt_logprobs is not None
    first, second = out.prompt_logprobs[2][40], out.prompt_logprobs[5][40]  # the 45-token context's, twice
    assert first is not None and second is not None
    assert first == second and first is not second
    first.top.append((0, 0.0))
    assert len(second.top) == 2


def _grouped(prompts: list[list[int]], min_saved: int, monkeypatch: pytest.MonkeyPatch) -> Groups | None:
    monkeypatch.setattr(decodekit.prefix, "MIN_SAVED", min_saved)
    kv = dk.create_cache("dense", dk.CacheSpec.for_model(tiny_gpt(1).spec, batch_size=len(prompts), capacity=32))
    return shared_prefixes(kv, prompts)


def test_the_grouping_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-worked: the tokens saved are the prefix forward's width (the longest prompt less the longest suffix)
    times the rows it spares (each group's members but one); groups are numbered by their first prompts."""
    two = [[9, 9, 9, 9, 1, 2], [5, 5, 5], [1, 2, 3, 4, 5, 6], [9, 9, 9, 9, 3, 4], [1, 2, 3, 4, 7, 8]]
    # {0, 3} and {2, 4} share 4 tokens, [5, 5, 5] alone (its prefix [5, 5]): width 6 - 2, 5 - 3 rows spared: 8
    assert _grouped(two, 8, monkeypatch) == Groups(of=[0, 1, 2, 0, 2], firsts=[0, 1, 2], prefixes=[4, 2, 4])
    assert _grouped(two, 9, monkeypatch) is None
    # 4 prompts sharing 10 tokens, 2 sharing 2 before 20 each of their own: together the width would be 22 - 20,
    # saving (6 - 2) x 2 = 8; the pair apart, 22 - 1 = 21 wide, saves (6 - 3) x 21 = 63
    tens = [[1] * 10 + [t] for t in (2, 3, 4, 5)] + [[7, 7, *range(20 + t, 40 + t)] for t in (0, 1)]
    assert _grouped(tens, 63, monkeypatch) == Groups(of=[0, 0, 0, 0, 1, 2], firsts=[0, 4, 5], prefixes=[10, 21, 21])
    assert _grouped(tens, 64, monkeypatch) is None
    # A (2 x 9 tokens) shares 8, B (5 x 9) shares 2 before 7 of each's own: both groups, 9 - 7 = 2 wide (A's prefix
    # cut to 2), 5 rows spared: 10; B's prompts apart, 8 wide, 1 row: 8; A's apart, 2 wide, 4 rows: 8
    cut = [[1] * 8 + [t] for t in (2, 3)] + [[4, 4, *range(10 * t, 10 * t + 7)] for t in range(1, 6)]
    assert _grouped(cut, 1, monkeypatch) == Groups(of=[0, 0, 1, 1, 1, 1, 1], firsts=[0, 2], prefixes=[2, 2])


def test_a_groups_prefix_past_the_width_is_cut(gpt: GPT, monkeypatch: pytest.MonkeyPatch) -> None:
    """2 prompts share 40 tokens, 8 share 20 before 15 of their own: the prefixes' forward is 41 - 15 = 26 wide, the
    first group's prefix cut to 26 (its rows' suffixes of 15 then end with the longest prompt): 8 x 26 saved, more
    than either group apart (7 x 26, 1 x 40)."""
    rng = random.Random(2)
    prompts = [[*PREFIX, t] for t in (1, 2)] + [
        [60, *PREFIX[:19], *(rng.randrange(1, 101) for _ in range(15))] for _ in range(8)
    ]
    options: dict[str, Any] = {"max_new_tokens": 5, "seed": list(range(10)), "logprobs": 1, "prompt_logprobs": 1}
    _against_unshared_and_alone(gpt, monkeypatch, prompts, [(2, 26), (10, 15)], **options)


def test_the_shortest_suffix_that_joins_a_run_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-worked: neighbours pair with suffixes of 2 (A, B), 4 (B, C) and 4 (C, D), but all four need 5 (their
    prefix 4, C's 9 tokens): suffix 2, width 7, 1 row spared: 7; suffix 4: {A, B} and {C, D}, width 5, 2 rows: 10;
    suffix 5: one group, width 4, 3 rows: 12. The search tries the run's own suffix, not only each pair's."""
    prompts = [[1] * 5, [1] * 5 + [2], [1] * 5 + [3] * 4, [1] * 5 + [4]]
    assert _grouped(prompts, 12, monkeypatch) == Groups(of=[0, 0, 0, 0], firsts=[0], prefixes=[4])
    assert _grouped(prompts, 13, monkeypatch) is None

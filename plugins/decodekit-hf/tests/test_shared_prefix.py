"""Prefixes a batch's prompts share prefilled once (`decodekit.prefix`) through the bridge: the prefixes' forward (a
row per group, written to its rows of the cache), the suffixes' (right-padded, against the prefixes), then each row
moved to end with the prompts. Every architecture gives the tokens, logprobs and prompt logprobs of the unshared prefill
(each whole prompt left-padded), and the trained Llama each prompt's own greedy tokens decoded alone."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel

import decodekit as dk
import decodekit.engine

RNG = random.Random(0)
PREFIX = [RNG.randrange(1, 84) for _ in range(36)]  # 4 rows x 36: past the rule's 96 tokens saved
PROMPTS = [PREFIX + s for s in ([7, 3, 9], [8, 1, 1, 5, 60, 2, 9, 4, 4], [9], [11, 12, 13, 14, 15])]
# 3 questions (contexts of 20, 26 and 32 tokens, first tokens apart), 4 choices of 1-4 tokens each, a question's
# choices apart: 3 prefixes in one forward (left-padded to 32), then 12 suffixes of up to 4.
CONTEXTS = [[b + 1, *(RNG.randrange(1, 84) for _ in range(n - 1))] for b, n in enumerate((20, 26, 32))]
QUESTIONS = [c + choice for choice in ([7], [8, 1], [9, 2, 3], [10, 4, 5, 6]) for c in CONTEXTS]
GROUPED = [*QUESTIONS, [80], [81, 81]]  # and two short prompts that share nothing: a group with an empty prefix


def _decode(model: HFModel, prompts: list[list[int]], **options: Any) -> tuple[dk.Generation, list[tuple[int, int]]]:
    """The result and the `[rows, tokens]` of each forward."""
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        return dk.decode(model, prompts, **options), shapes
    finally:
        hook.remove()


R = len(PROMPTS)
_PREFILL = {  # the prefix once, then the suffixes (their last tokens after the rest, unless every column is scored)
    True: [(1, 36), (R, 9), (R, 1)],
    False: [(1, 36), (R, 8), (R, 1)],
}


def _shared_and_not(
    model: HFModel, monkeypatch: pytest.MonkeyPatch, prompts: list[list[int]], **options: Any
) -> tuple[dk.Generation, dk.Generation]:
    shared, shapes = _decode(model, prompts, **options)
    assert shapes[:3] == _PREFILL[options.get("prompt_logprobs") is not None]
    with monkeypatch.context() as patch:
        patch.setattr(decodekit.engine, "shared_prefixes", lambda kv, prompts: None)
        unshared, shapes = _decode(model, prompts, **options)
    assert shapes[0] == (len({tuple(p) for p in prompts}), 45)  # copies computed once
    return shared, unshared


def assert_same(shared: dk.Generation, unshared: dk.Generation, tol: float = 1e-5) -> None:
    assert shared.tokens == unshared.tokens
    for mine, theirs in zip(shared.logprobs or [], unshared.logprobs or []):
        assert [lp.raw for lp in mine] == pytest.approx([lp.raw for lp in theirs], abs=tol)
    assert (shared.prompt_logprobs is None) == (unshared.prompt_logprobs is None)
    for mine_p, theirs_p in zip(shared.prompt_logprobs or [], unshared.prompt_logprobs or []):
        assert [p and p.logprob for p in mine_p] == pytest.approx([p and p.logprob for p in theirs_p], abs=tol)
        assert [p and p.rank for p in mine_p] == [p and p.rank for p in theirs_p]
        assert [p and [i for i, _ in p.top] for p in mine_p] == [p and [i for i, _ in p.top] for p in theirs_p]


@pytest.mark.parametrize("cache", ["dense", "int8"])
def test_a_shared_prefix_gives_the_unshared_results(hf_model: Any, cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2 and Llama at random, and the trained Llama: greedy, with logprobs and prompt logprobs."""
    model = HFModel(hf_model)
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 8, "cache": cache, "logprobs": 2}
    shared, unshared = _shared_and_not(model, monkeypatch, PROMPTS, prompt_logprobs=2, **options)
    assert_same(shared, unshared, 2e-3 if cache == "int8" else 1e-5)  # int8: a key a rounding off may quantize apart


def test_copies_and_beams_of_prompts_sharing_a_prefix(llama: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = HFModel(llama)
    samples = [p for p in PROMPTS for _ in range(2)]
    assert_same(*_shared_and_not(model, monkeypatch, samples, max_new_tokens=6, seed=list(range(8)), logprobs=1))
    beams = _shared_and_not(model, monkeypatch, PROMPTS, strategy="beam(num_beams=3)", max_new_tokens=6)
    assert_same(*beams)


def test_the_trained_llamas_rows_are_each_prompt_alone(trained: Any) -> None:
    """A second implementation: each prompt decoded alone, no batch, nothing shared. Each row's next token is its
    suffix's last column and its cache row is moved to end with the prompts: without either (the forward's last
    column read, `crop_rows` skipped), rows decode other tokens."""
    model = HFModel(trained)
    out, shapes = _decode(model, PROMPTS, chain="greedy", max_new_tokens=12)
    assert shapes[:3] == _PREFILL[False]
    alone = [dk.generate(model, [p], chain="greedy", max_new_tokens=12).tokens[0] for p in PROMPTS]
    assert out.tokens == alone


def test_every_architecture_gives_the_unshared_results(
    arch_model: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sliding windows (Gemma 2, 3, Mistral-like), ALiBi (Falcon), learned positions (OPT), eager attention: the
    bridge's cache that keeps every token, each model masking as it does."""
    _, hf = arch_model
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 6, "logprobs": 1, "prompt_logprobs": 1}
    assert_same(*_shared_and_not(HFModel(hf), monkeypatch, PROMPTS, **options), tol=1e-4)
    shared, shapes = _decode(HFModel(hf), GROUPED, **options)  # groups: a narrower prefix's rows left-padded
    assert shapes[0] == (4, 32)
    monkeypatch.setattr(decodekit.engine, "shared_prefixes", lambda kv, prompts: None)
    assert_same(shared, dk.decode(HFModel(hf), GROUPED, **options), tol=1e-4)


@pytest.mark.parametrize("model_name", ["gpt2", "llama"])
def test_each_questions_context_is_prefilled_once(
    model_name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of prompts, each group's prefix written to its rows: a row whose prefix is shorter than the widest
    attends over padding the bridge's mask must hide, its suffix at its own positions (GPT-2's learned ones, Llama's
    rotary ones). Two short prompts that share nothing make a group whose prefix is empty: its row of the prefixes'
    forward is all padding, their whole prompts in the suffixes' forward."""
    model = HFModel(request.getfixturevalue(model_name))
    prompts = GROUPED
    scored: dict[str, Any] = {"max_new_tokens": 0, "prompt_logprobs": 2}
    options: dict[str, Any] = {"max_new_tokens": 6, "seed": list(range(14)), "logprobs": 1}
    for opts, prefill in ((scored, [(4, 32), (14, 4)]), (options, [(4, 32), (14, 3), (14, 1)])):
        shared, shapes = _decode(model, prompts, **opts)
        assert shapes[: len(prefill)] == prefill
        with monkeypatch.context() as patch:
            patch.setattr(decodekit.engine, "shared_prefixes", lambda kv, prompts: None)
            unshared, shapes = _decode(model, prompts, **opts)
        assert shapes[0] == (14, 36)
        assert_same(shared, unshared)


@torch.no_grad()
def test_frequencies_chosen_by_the_forwards_length_keep_each_prompt_whole(build_arch: Any) -> None:
    """longrope (Phi-3's) picks its frequencies per forward by its largest position: 6 prompts of 50-60 tokens that
    share 20 would put the prefixes' forward within the original context of 32 (the short factors) and the suffixes'
    past it (the long ones), where each whole prompt's forward rotates every key by the long ones. The spec says so
    (`splittable=False`) and the prompts are prefilled whole (shared, 48 of 49 prompt logprobs were off by up to 3.6).
    The oracle: transformers' own forward of each prompt alone."""
    rope = {"rope_type": "longrope", "rope_theta": 100.0, "original_max_position_embeddings": 32}
    rope |= {"short_factor": [1.0] * 4, "long_factor": [4.0, 5.0, 6.0, 7.0]}  # head_dim 8: 4 frequencies
    hf = build_arch("phi3", rope_parameters=rope, original_max_position_embeddings=32)  # as Phi-3's config.json
    rng = random.Random(3)
    prefix = [rng.randrange(1, 84) for _ in range(20)]
    prompts = [prefix + [rng.randrange(1, 84) for _ in range(n)] for n in (30, 33, 35, 36, 38, 40)]
    model = HFModel(hf)
    assert model.spec.splittable is False
    out, shapes = _decode(model, prompts, max_new_tokens=0, prompt_logprobs=0)
    assert shapes == [(6, 60)]  # each prompt whole, left-padded
    assert out.prompt_logprobs is not None
    for prompt, scores in zip(prompts, out.prompt_logprobs):
        alone = hf(torch.tensor([prompt])).logits[0, :-1].log_softmax(-1)
        expected = alone.gather(1, torch.tensor(prompt[1:])[:, None])[:, 0].tolist()
        assert [s and s.logprob for s in scores[1:]] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    ("rope", "splittable"),
    [
        ({"rope_type": "default", "rope_theta": 100.0}, True),
        ({"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0}, True),
        ({"rope_type": "dynamic", "rope_theta": 100.0, "factor": 2.0}, False),
    ],
)
def test_only_frequencies_chosen_by_length_keep_prompts_whole(build_arch: Any, rope: Any, splittable: bool) -> None:
    assert HFModel(build_arch("llama", rope_parameters=rope)).spec.splittable is splittable


def test_a_query_temperature_by_cache_slot_keeps_each_prompt_whole(build_arch: Any) -> None:
    """Llama 4's query temperature on its NoPE layers counts cache slots (`get_seq_length()` plus an index), as
    `generate()` does: a shared prefix's forward puts a prompt's tokens in other slots than its whole prompt's
    (shared, its prompt logprobs moved by up to 0.39). The spec says so and the prompts go whole."""
    config: dict[str, Any] = dict(vocab_size=256, num_key_value_heads=2, head_dim=8, no_rope_layer_interval=2)
    config |= dict(floor_scale=4, attention_chunk_size=6, attn_scale=0.5, num_local_experts=4, intermediate_size_mlp=64)
    model = HFModel(build_arch("llama4_text", **config))  # test_newer_architectures.py's (floor_scale=4: it bites)
    assert model.spec.splittable is False
    options: dict[str, Any] = {"max_new_tokens": 0, "prompt_logprobs": 1}
    _, shapes = _decode(model, GROUPED, **options)
    assert shapes == [(14, 36)]  # each prompt whole, left-padded, as generate() lays them out

"""The context is checked per prompt: each row is left-padded and starts at position 0, so what the model must know
is each prompt's own reach, its length + its own `max_new_tokens` (the batch's slots may pass the context). A long
prompt with a short limit beside a short prompt with a long one is decoded, every row as it is alone, by every model
family and strategy; a prompt that does not fit is refused by name. The transformers bridge: decodekit-hf's
tests/test_row_reach.py."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal

import pytest
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

CONTEXT = 16
LONG, SHORT = list(range(3, 3 + CONTEXT - 4)), [7, 8]  # 12 tokens and 2
LIMITS = [3, CONTEXT - 6]  # reaches 15 and 12 positions, within 16; slots 12 + 10 = 22, past it
SEEDS = [5, 6]


def _gpt(position: Literal["learned", "rope"], seed: int = 0) -> GPT:
    import torch

    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=40, block_size=CONTEXT, n_layer=2, n_head=4, n_kv_head=2, n_embd=32)
    return GPT(dataclasses.replace(config, position=position)).eval()


MODELS: dict[str, Callable[[], dk.Model]] = {
    "gpt-learned": lambda: _gpt("learned"),
    "gpt-rope": lambda: _gpt("rope"),
    "tinylm-learned": lambda: TinyLM(40, max_positions=CONTEXT, position="learned"),
    "tinylm-rope": lambda: TinyLM(40, max_positions=CONTEXT),
}


def _each_as_alone(model: Any, prompts: list[Any], limits: list[int], run: Any = dk.decode, **options: Any) -> None:
    """The batch decoded by `run`, with per-prompt limits and seeds; each row equals its prompt decoded alone."""
    out = run(model, prompts, max_new_tokens=limits, seed=SEEDS, stop_tokens=[], **options)
    for b, (prompt, limit) in enumerate(zip(prompts, limits)):
        alone = run(model, [prompt], max_new_tokens=limit, seed=[SEEDS[b]], stop_tokens=[], **options)
        assert out.tokens[b] == alone.tokens[0], f"row {b}"
        assert len(out.tokens[b]) == limit


def test_tiny_shakespeare_decodes_the_rows_that_fit_alone() -> None:
    """The brief's case: refused as "prompt of 246 tokens + max_new_tokens=236 = 482 tokens exceeds 256"."""
    model = dk.load_model("tiny-shakespeare")
    ctx = model.spec.max_positions
    _each_as_alone(model, ["a" * (ctx - 10), "ROMEO:"], [5, ctx - 20], chain="greedy")


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cache", ["dense", "gqa", "int8"])
@pytest.mark.parametrize("chain", ["greedy", "top_k(8) | temperature(0.9)"])
def test_each_row_is_decoded_as_alone(name: str, cache: str, chain: str) -> None:
    _each_as_alone(MODELS[name](), [LONG, SHORT], LIMITS, cache=cache, chain=chain)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cache", ["window(size=8, sinks=0)", "h2o(budget=12)"])
def test_an_evicting_cache_decodes_each_row_as_alone(name: str, cache: str) -> None:
    """The learned GPT fed a row that had ended past its context (an evicting cache moves rotary keys only)."""
    _each_as_alone(MODELS[name](), [LONG, SHORT], LIMITS, cache=cache, chain="greedy")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_cache_none_crops_each_row_as_alone(name: str) -> None:
    _each_as_alone(MODELS[name](), [LONG, SHORT], LIMITS, cache="none", chain="top_k(8)")


@pytest.mark.parametrize("name", ["gpt-rope", "gpt-learned"])
@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_speculative_decodes_each_row_as_alone(name: str, draft: str) -> None:
    from decodekit_speculative.strategy import speculative

    model = MODELS[name]()
    drafter = "ngram" if draft == "ngram" else _gpt("rope" if name == "gpt-rope" else "learned", seed=1)
    for chain, cache in [("greedy", "dense"), ("top_k(8)", "dense"), ("top_k(8)", "none")]:
        _each_as_alone(model, [LONG, SHORT], LIMITS, speculative, draft=drafter, k=3, chain=chain, cache=cache)


@pytest.mark.parametrize("name", ["gpt-rope", "gpt-learned"])
def test_cfg_decodes_each_row_as_alone(name: str) -> None:
    """The pair rows (prompt, negative) took the largest limit each: refused as past the context."""
    model, negatives = MODELS[name](), [[9], [10, 11]]
    options: dict[str, Any] = {"strategy": "cfg", "scale": 2.0, "chain": "top_k(8)", "stop_tokens": []}
    out = dk.decode(model, [LONG, SHORT], negative=negatives, max_new_tokens=LIMITS, seed=SEEDS, **options)
    for b, prompt in enumerate([LONG, SHORT]):
        alone = dk.decode(
            model, [prompt], negative=[negatives[b]], max_new_tokens=LIMITS[b], seed=[SEEDS[b]], **options
        )
        assert out.tokens[b] == alone.tokens[0], f"row {b}"


def test_beam_still_refuses_limits_that_differ() -> None:
    with pytest.raises(dk.ParameterError, match="differ between prompts"):
        dk.decode(MODELS["gpt-rope"](), [LONG, SHORT], strategy="beam(num_beams=2)", max_new_tokens=LIMITS)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ([3, CONTEXT - 1], "prompt 1 of 2 tokens + max_new_tokens[1]=15 = 17 tokens exceeds the model's context of 16"),
        (5, "prompt 0 of 12 tokens + max_new_tokens=5 = 17 tokens exceeds the model's context of 16"),
    ],
)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_prompt_past_the_context_is_refused_by_name(name: str, limits: Any, message: str) -> None:
    with pytest.raises(dk.ContextLengthError, match=re.escape(message)):
        dk.generate(MODELS[name](), [LONG, SHORT], max_new_tokens=limits)


@pytest.mark.parametrize(
    ("negative", "limits", "message"),
    [
        ([[9], [10, 11]], [3, CONTEXT - 1], "prompt 1 of 2 tokens + max_new_tokens[1]=15 = 17 tokens exceeds"),
        (
            [[9], [1] * 7],
            [3, CONTEXT - 6],
            "strategy cfg: negative[1] of 7 tokens (its prompt: 2) + max_new_tokens[1]=10",
        ),
    ],
)
def test_cfg_names_the_prompt_or_the_negative_past_the_context(
    negative: list[list[int]], limits: list[int], message: str
) -> None:
    """The pairs' check named its pair row ("prompt 3"), not the prompt or its negative."""
    with pytest.raises(dk.ContextLengthError, match=re.escape(message)):
        dk.decode(MODELS["gpt-rope"](), [LONG, SHORT], strategy="cfg", negative=negative, max_new_tokens=limits)


def test_compiled_rows_past_the_context_in_slots_break_no_graph(graphs: list[Any]) -> None:
    """The GPT read its positions on the host once the slots passed its context: a graph break every step."""
    from compile_counting import dynamo_warnings

    model = MODELS["gpt-learned"]()
    options: dict[str, Any] = {"max_new_tokens": LIMITS, "chain": "greedy", "stop_tokens": []}
    with dynamo_warnings() as warnings:
        out = dk.generate(model, [LONG, SHORT], compile=True, **options)
    assert out.tokens == dk.generate(model, [LONG, SHORT], **options).tokens
    assert [w for w in warnings if "Graph break" in w] == []


@pytest.mark.parametrize(
    ("prompts", "limits", "cache", "message"),
    [
        (  # "shorten the prompt, lower max_new_tokens": no number, the user had to work out 16 - 2
            [LONG, SHORT],
            [3, CONTEXT - 1],
            "dense",
            "prompt 1 of 2 tokens + max_new_tokens[1]=15 = 17 tokens exceeds the model's context of 16 positions; "
            "shorten the prompt, lower max_new_tokens to 14 or fewer (the context less the prompt's 2 tokens), or use "
            "a cache that evicts (cache='window(size=N)'), or cache='none', which crops the context",
        ),
        (  # a prompt the context cannot hold: lowering max_new_tokens cannot help
            [list(range(CONTEXT)), SHORT],
            1,
            "dense",
            "prompt 0 of 16 tokens + max_new_tokens=1 = 17 tokens exceeds the model's context of 16 positions; "
            "shorten the prompt to 15 tokens or fewer (the context less max_new_tokens=1), or use a cache that evicts "
            "(cache='window(size=N)'), or cache='none', which crops the context",
        ),
        (  # it said "shorten the prompt to fewer than 16 tokens": 15 + 6 still does not fit
            [list(range(CONTEXT + 4)), SHORT],
            6,
            "dense",
            "prompt 0 of 20 tokens + max_new_tokens=6 = 26 tokens exceeds the model's context of 16 positions; "
            "shorten the prompt to 10 tokens or fewer (the context less max_new_tokens=6), or use a cache that evicts "
            "(cache='window(size=N)'), or cache='none', which crops the context",
        ),
        (  # and where max_new_tokens alone fills the context, no prompt fits
            [list(range(CONTEXT + 4)), SHORT],
            CONTEXT,
            "dense",
            "prompt 0 of 20 tokens + max_new_tokens=16 = 36 tokens exceeds the model's context of 16 positions; "
            "shorten the prompt and lower max_new_tokens: together at most 16 tokens, or use a cache that evicts "
            "(cache='window(size=N)'), or cache='none', which crops the context",
        ),
        (  # learned positions through an evicting cache: "or fewer tokens", how many not said
            [SHORT, LONG],
            [3, 6],
            "window(size=8, sinks=2)",
            "prompt 1 of 12 tokens + max_new_tokens[1]=6 = 18 tokens exceeds the model's context of 16 positions, and "
            "its positions are absolute (not rotary): an evicting cache cannot take it further; use cache='none' (it "
            "crops the context) or fewer tokens: lower max_new_tokens to 4 or fewer (the context less the prompt's 12 "
            "tokens)",
        ),
    ],
)
def test_past_the_context_says_how_many_tokens_fit(prompts: Any, limits: Any, cache: str, message: str) -> None:
    model = MODELS["gpt-rope" if cache == "dense" else "gpt-learned"]()
    with pytest.raises(dk.ContextLengthError) as info:
        dk.generate(model, prompts, max_new_tokens=limits, cache=cache)
    assert str(info.value) == message
    if isinstance(limits, list):  # the number given is the most that fits: with it, the named prompt decodes
        most = int(message.split("to ")[-1].split()[0])
        fitted = [most if b == int(message.split()[1]) else n for b, n in enumerate(limits)]
        assert len(dk.generate(model, prompts, max_new_tokens=fitted, cache=cache).tokens) == 2


@pytest.mark.parametrize("cache", ["h2o(budget=12, sinks=2, recent=2)", "snapkv(budget=12, sinks=2, recent=2)"])
def test_learned_positions_past_the_context_blame_the_positions_not_the_scored_cache(cache: str) -> None:
    """A scored cache keeps absolute keys where they are, so its reach is the whole text; refused for that, the
    user read 'allowed: a cache whose window fits the context', which no cache is for learned positions (the
    window's refusal says why: its positions are absolute)."""
    with pytest.raises(dk.ContextLengthError) as info:
        dk.generate(MODELS["gpt-learned"](), [SHORT], max_new_tokens=3 * CONTEXT, cache=cache)
    assert "its positions are absolute (not rotary): an evicting cache cannot take it further" in str(info.value)

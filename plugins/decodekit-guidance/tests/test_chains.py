"""Any chain runs on the guided scores: a grammar ends the pair when its text is whole, per prompt; a penalty counts
the prompt's own history (not the negative prompt's)."""

from __future__ import annotations

import re

import pytest
import torch
from decodekit_guidance.strategy import cfg

import decodekit as dk
from decodekit.testing.tiny_lm import TinyLM

PATTERN = r"(thou|thee|the|my|sir) [a-z]{1,6}[.!?]"


def test_a_grammar_constrains_the_guided_text_and_ends_the_pair() -> None:
    pytest.importorskip("decodekit_grammar")
    model = dk.load_model("tiny-shakespeare")
    prompts = ["ROMEO:\n", "JULIET:\nO Romeo, Romeo!\nROMEO:\n"]
    chain = dk.Chain([dk.create("regex", pattern=PATTERN)], dk.create("greedy"))
    out = cfg(model, prompts, scale=3.0, negative="NURSE:\n", chain=chain, max_new_tokens=40)
    assert out.text is not None and all(re.fullmatch(PATTERN, t) for t in out.text), out.text
    assert out.stopped_by == ["regex", "regex"] and out.finish_reasons == ["stop", "stop"]
    plain = dk.generate(model, prompts, chain=chain, max_new_tokens=40)
    assert out.tokens != plain.tokens  # guided: another valid text


def test_a_penalty_sees_the_prompts_history(model: TinyLM) -> None:
    """The chain's context is the prompt's row: a repetition penalty over the prompt's tokens and the generated
    ones, as `sample`'s, whatever the negative prompt holds."""
    seen: list[torch.Tensor] = []

    def record(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        seen.append(ctx.tokens.clone())
        return logits

    prompts = [[1, 2, 3, 4], [5, 6]]
    out = cfg(
        model, prompts, negative=[[30, 31, 32], [33]], chain=dk.Chain([record], dk.create("greedy")), max_new_tokens=3
    )
    last = seen[-1]
    assert last[0].tolist() == [1, 2, 3, 4, *out.tokens[0][:2]]
    assert last[1, -4:].tolist() == [5, 6, *out.tokens[1][:2]]  # left-padded as under `sample`

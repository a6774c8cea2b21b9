"""The LSTM draft through a prefix common to its prompts prefilled once (`decodekit.prefix`): its "cache" holds a
state per token and each forward starts from the last slot's, so the suffixes start from the prefix's last state, and
`crop_rows` leaves each row's own last state in the last slot. Tokens and prompt logprobs equal the unshared
prefill's, and each prompt's alone."""

from __future__ import annotations

from typing import Any

import pytest

import decodekit as dk
import decodekit.engine

PREFIX = "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
SUFFIXES = ["JULIET: Ay me!", "ROMEO: She speaks.", "O", "MERCUTIO: Nay, gentle Romeo, we must have you dance."]


@pytest.mark.parametrize("cache", ["dense", "int8"])
def test_the_lstm_decodes_as_without_sharing_and_each_prompt_alone(cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = dk.load_model("tiny-shakespeare-draft")
    prompts = [model.tokenizer.encode(PREFIX + s) for s in SUFFIXES]
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 12, "cache": cache, "prompt_logprobs": 1}
    shapes: list[tuple[int, ...]] = []
    hook = model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    shared = dk.generate(model, prompts, **options)
    hook.remove()
    assert shapes[:2] == [(1, len(PREFIX)), (4, max(map(len, SUFFIXES)))]
    alone = [dk.generate(model, [p], **options).tokens[0] for p in prompts]
    monkeypatch.setattr(decodekit.engine, "shared_prefixes", lambda kv, prompts: None)
    unshared = dk.generate(model, prompts, **options)
    assert shared.tokens == unshared.tokens == alone
    assert shared.prompt_logprobs is not None and unshared.prompt_logprobs is not None
    for mine, theirs in zip(shared.prompt_logprobs, unshared.prompt_logprobs):
        assert [p and p.logprob for p in mine] == pytest.approx([p and p.logprob for p in theirs], abs=1e-5)
        assert [p and p.rank for p in mine] == [p and p.rank for p in theirs]


def test_the_lstm_over_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two prefixes of different lengths (left-padded: the shorter's rows start from position 0 after padding) and
    a prompt alone."""
    model = dk.load_model("tiny-shakespeare-draft")
    heads = [PREFIX, "JULIET: O Romeo, Romeo, wherefore art thou Romeo? Deny thy father and refuse thy name. "]
    texts = [h + s for s in SUFFIXES[:3] for h in heads] + ["KING: "]
    prompts = [model.tokenizer.encode(t) for t in texts]
    options: dict[str, Any] = {"chain": "greedy", "max_new_tokens": 8, "prompt_logprobs": 1}
    shapes: list[tuple[int, ...]] = []
    hook = model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    shared = dk.generate(model, prompts, **options)
    hook.remove()
    assert shapes[0][0] == 3  # the two prefixes, the prompt alone
    monkeypatch.setattr(decodekit.engine, "shared_prefixes", lambda kv, prompts: None)
    unshared = dk.generate(model, prompts, **options)
    assert shared.tokens == unshared.tokens
    assert shared.prompt_logprobs is not None and unshared.prompt_logprobs is not None
    for mine, theirs in zip(shared.prompt_logprobs, unshared.prompt_logprobs):
        assert [p and p.logprob for p in mine] == pytest.approx([p and p.logprob for p in theirs], abs=1e-5)

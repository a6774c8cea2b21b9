"""The `cfg` strategy: classifier-free guidance with the semantics of transformers' `guidance_scale`
(`UnbatchedClassifierFreeGuidanceLogitsProcessor`, transformers 5.25) for decoder-only models.

Each prompt runs as a pair of rows in one batched forward: the prompt (conditional) and its negative prompt
(unconditional; without one, the prompt's last token). Each step the guided scores
`scale * (log_softmax(cond) - log_softmax(uncond)) + log_softmax(uncond)` go through the user's whole chain, as
`sample` runs it on logits, and the token it picks is appended to both rows of the pair.

It is a policy over the engine (`decodekit.engine`) with two decodings of one request: the *pair* decoding holds the
cache and runs the model on two rows per prompt (its history and positions: the engine's, so every cache and
`cache="none"` work); the strategy's own decoding, opened without a cache, holds one row per prompt, as `sample`'s
would: the chain's context (the prompt's history, its seed, the stages' state) and the rows' outputs (stop tokens,
stop strings, text, logprobs, events).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from torch import Tensor
from typing_extensions import Unpack

from decodekit.chain import Chain, Picked
from decodekit.engine import PREALLOCATED_COLUMNS, Decoding, check_rows, sample_steps
from decodekit.errors import ContextLengthError
from decodekit.model import Model
from decodekit.params import Params
from decodekit.prompts import Prompts
from decodekit.request import DecodeOptions
from decodekit.results import Generation, prompt_logprobs
from decodekit.strategies import run_decode
from decodekit_guidance.negative import negative_rows
from decodekit_guidance.params import GuidanceParams, Negative
from decodekit_guidance.scores import guided_scores

__all__ = ["cfg", "guidance_policy"]


def cfg(
    model: Model, prompts: Prompts, *, scale: float = 1.5, negative: Negative = None, **options: Unpack[DecodeOptions]
) -> Generation:
    """`dk.decode(model, prompts, strategy="cfg", scale=scale, negative=negative, **options)`.

    scale: transformers' `guidance_scale`, -1e4 <= scale <= 1e4; 1 is plain `sample` (no second row), > 1 steers away
        from the negative prompt, < 1 towards it.
    negative: transformers' `negative_prompt_ids`: text or token ids for every prompt, or one per prompt; None
        (the default): each prompt's last token.
    options: `dk.generate`'s (chain, max_new_tokens, cache, stop_tokens, stop_strings, seed, logprobs,
        prompt_logprobs, compile).
    """
    return run_decode(model, prompts, "cfg", {"scale": scale, "negative": negative, **options}, "cfg")


def guidance_policy(d: Decoding, params: Params) -> Iterator[None]:
    """The registered strategy (see the module docstring); opens its decodings now, so `dk.stream` refuses at its
    call what they refuse."""
    assert isinstance(params, GuidanceParams)
    negatives = negative_rows(params.negative, d.prompts, d.request.tokenizer, d.spec.vocab_size)
    if params.scale == 1:  # transformers adds no processor at 1: the chain sees the logits, as under `sample`
        d.open()
        return sample_steps(d)
    pairs = _open_pairs(d, negatives)
    return _steps(d, pairs, params.scale)


def _open_pairs(d: Decoding, negatives: list[list[int]]) -> Decoding:
    """Open the pair decoding (row 2b: prompt b, row 2b + 1: its negative prompt) with the request's cache, then
    `d` without one: the pairs do every forward, and a cache of `d`'s would only take memory."""
    request = d.request
    rows = [row for prompt, negative in zip(d.prompts, negatives) for row in (prompt, negative)]
    pair_request = replace(
        request,
        prompts=rows,
        chain=Chain(),  # never run: `d`'s chain picks
        stop_tokens=[frozenset()] * len(rows),  # the pairs end when `d`'s rows do
        stop_strings=[()] * len(rows),
        seed=0,  # nothing is drawn; a fixed seed leaves torch's global generator alone
        logprobs=None,
        # each pair row its prompt's limit: the context is checked per row (`d`'s rows end them)
        limits=None if request.limits is None else tuple(n for n in request.limits for _ in range(2)),
    )
    # Two rows per prompt: refused by the number of prompts the caller gave, before the pairs' own check.
    columns = max(map(len, rows)) + min(request.max_new_tokens, PREALLOCATED_COLUMNS)
    check_rows(f"strategy {d.strategy}", "batch size", len(d.prompts), len(rows), columns, d.model)
    pairs = type(d)(pair_request, d.strategy, events=False)  # the same kind: `dk.validate`'s stops at the model
    try:
        pairs.open()
    except ContextLengthError as error:  # it names a pair row: name the negative prompt, or the prompt by `d`'s check
        if (negative := _negative_too_long(d, negatives)) is not None:
            raise negative from error
        d.open()  # refuses as the pairs did, naming the prompt by its index
        raise
    d.request = replace(request, cache=None)
    d.open()
    return pairs


def _negative_too_long(d: Decoding, negatives: list[list[int]]) -> ContextLengthError | None:
    """The error naming the negative prompt that reaches furthest (its length + its prompt's limit), where it is past
    the context and every prompt fits (the pairs' own error names a pair row, not a prompt)."""
    limit, context = d.request.limit, d.spec.max_positions
    if any(len(p) + limit(b) > context for b, p in enumerate(d.prompts)):
        return None
    b = max(range(len(negatives)), key=lambda row: len(negatives[row]) + limit(row))
    width, new = len(negatives[b]), limit(b)
    if width + new <= context:
        return None
    name = "negative" if all(row == negatives[0] for row in negatives) else f"negative[{b}]"
    limits = "max_new_tokens" if d.request.limits is None else f"max_new_tokens[{b}]"
    return ContextLengthError(
        f"strategy cfg: {name} of {width} tokens (its prompt: {len(d.prompts[b])}) + {limits}={new} = "
        f"{width + new} tokens exceeds the model's context of {context} positions (the negative prompt is decoded "
        f"beside its prompt); shorten the negative prompt to at most {context - new} tokens, or lower {limits} to "
        f"{context - width} or fewer"
    )


def _steps(d: Decoding, pairs: Decoding, scale: float) -> Iterator[None]:
    """`sample_steps` with the model's logits replaced by the guided scores of each pair."""
    logits = pairs.prefill()
    if pairs.prompt_logprobs is not None:  # the model's, as under `sample`: the prompts' rows, not the negatives'
        d.prompt_logprobs = pairs.prompt_logprobs[0::2]
    while True:
        cond, uncond = logits[0::2], logits[1::2]
        picked = d.pick(guided_scores(cond, uncond, scale))
        d.advance(picked if picked.logprobs is None else _raw_from_model(picked, cond, d.request.logprobs or 0))
        yield
        if d.done:
            return
        pairs.append(picked.tokens.repeat_interleave(2))
        logits = pairs.forward()


def _raw_from_model(picked: Picked, cond: Tensor, n: int) -> Picked:
    """`picked` with `raw`, `raw_top` and `rank` the conditional model's (`log_softmax(cond)`, transformers'
    `output_logits`); `processed` stays the chain's on the guided scores."""
    assert picked.logprobs is not None
    model = prompt_logprobs(cond, picked.tokens, n)  # each token's log-probability, rank and top n under `cond`
    merged: list[Any] = [
        replace(lps, raw=m.logprob, raw_top=m.top, rank=m.rank) for lps, m in zip(picked.logprobs, model)
    ]
    return Picked(picked.tokens, picked.ids, merged)

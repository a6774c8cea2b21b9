"""The decode loop: prefill the prompt once, then one token per step against a KV cache.

`generate` returns a `Generation`; `stream` yields a `TokenEvent` per row per step. Both check
their arguments once (`decodekit.request`) and share `run_loop`. `cache="none"` recomputes the
whole context every step, cropped to the model's last `max_positions` tokens (the uncached
loop of the course notes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor
from typing_extensions import Unpack

from decodekit.cache import KVCache
from decodekit.compiling import compiled_step
from decodekit.context import DecodeContext, row_generators
from decodekit.errors import ContextLengthError
from decodekit.prompts import Prompts, left_pad
from decodekit.request import DecodeOptions, DecodeRequest, decode_request
from decodekit.results import FinishReason, Generation, TokenEvent, TokenLogprobs, token_logprobs
from decodekit.spec import CacheSpec, ModelSpec
from decodekit.stage import Candidates
from decodekit.text import TextTracker

__all__ = [
    "Model",
    "check_context",
    "generate",
    "generate_request",
    "last_only",
    "model_device_dtype",
    "run_loop",
    "stream",
    "stream_request",
    "uncached_last_logits",
]

PREALLOCATED_COLUMNS = 4096
"""New-token columns of history allocated up front; more are added by doubling, so a huge
`max_new_tokens` (a generation meant to end on a stop token) allocates only what it uses."""


class Model(Protocol):
    """`model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`, plus `model.spec`.

    A model whose `supports_last_only` is True also takes `last_only=True` and then returns only
    the last column `[B, 1, V]`; the loop asks for it wherever it reads only `[:, -1]`.
    """

    spec: ModelSpec

    def __call__(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor: ...


def model_device_dtype(model: Any) -> tuple[torch.device, torch.dtype]:
    """The device and dtype of the model's first parameter (CPU float32 for a parameterless one)."""
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def check_context(spec: ModelSpec, prompt_tokens: int, max_new_tokens: int, cache: KVCache | None = None) -> None:
    """A decode through a cache that keeps every token must fit the model's context: prompt + new
    tokens <= `max_positions`. A cache that evicts decides for itself, step by step (`cache.reach`)."""
    total = prompt_tokens + max_new_tokens
    if cache is not None and not cache.keeps_all:
        return
    if total > spec.max_positions:
        raise ContextLengthError(
            f"prompt of {prompt_tokens} tokens + max_new_tokens={max_new_tokens} = {total} tokens exceeds the "
            f"model's context of {spec.max_positions} positions; shorten the prompt, lower max_new_tokens, "
            "use a cache that evicts (cache='window(size=\"auto\")'), or cache='none', which crops the context"
        )


def uncached_last_logits(model: Any, buf: Tensor, positions: Tensor, filled: int) -> Tensor:
    """Last-column logits `[B, V]` recomputed from `buf[:, :filled]`, cropped to the model's last
    `max_positions` columns, positions re-based so each row's window starts at 0 (the notes' crop)."""
    start = max(0, filled - model.spec.max_positions)
    pos = positions[:, start:filled]
    logits: Tensor = model(buf[:, start:filled], pos - pos[:, :1].clamp(min=0), None, **last_only(model))[:, -1]
    return logits


def last_only(model: Any) -> dict[str, bool]:
    """`{"last_only": True}` for a model that can return only the last column, else `{}`.

    The loop reads only `logits[:, -1]` after a prefill or a recomputation; a model whose
    `supports_last_only` is True then skips the output projection of every other column.
    """
    return {"last_only": True} if getattr(model, "supports_last_only", False) else {}


def _grow(buf: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """Twice the columns: history ids zero, positions continuing one per column."""
    n = buf.shape[1]
    more = positions[:, -1:] + torch.arange(1, n + 1, device=positions.device)
    return torch.cat([buf, torch.zeros_like(buf)], 1), torch.cat([positions, more], 1)


_Event = tuple[int, int, int, str | None, FinishReason | None, TokenLogprobs | None, int | str | None]
"""`TokenEvent`'s fields as a plain tuple: what the loop yields, `stream` wraps and `generate` reads."""


class _Start(NamedTuple):
    """Everything the first step needs."""

    kv: KVCache | None
    buf: Tensor  # [B, P + new columns]: the history, prompts left-padded
    positions: Tensor  # [B, P + new columns]: each column's position
    ctx: DecodeContext
    logits: Tensor  # [B, V]: the prompt's last column


def _prefill(request: DecodeRequest) -> _Start:
    """The cache, the history, the context, and the whole prompt run in one call."""
    model, rows, max_new_tokens = request.model, request.prompts, request.max_new_tokens
    spec: ModelSpec = model.spec
    B, lens = len(rows), [len(r) for r in rows]
    P = max(lens)
    device, dtype = model_device_dtype(model)
    kv: KVCache | None = None
    if request.cache is not None:
        kv = request.cache(
            CacheSpec.for_model(spec, batch_size=B, capacity=P + max_new_tokens, dtype=dtype, device=device)
        )
        check_context(spec, P, max_new_tokens, kv)
    buf, positions = left_pad(rows, P + min(max_new_tokens, PREALLOCATED_COLUMNS), device)
    ctx = DecodeContext(
        tokens=buf[:, :P],
        prompt_lengths=torch.tensor(lens, device=device) if len(set(lens)) > 1 else None,
        generators=row_generators(request.seed, B, device),
    )
    request.chain.init_state(ctx)
    # Left padding puts every row's last token in column P-1.
    if kv is None:
        logits = uncached_last_logits(model, buf, positions, P)
    else:
        logits = model(buf[:, :P], positions[:, :P], kv, **last_only(model))[:, -1]
    return _Start(kv, buf, positions, ctx, logits)


def run_loop(request: DecodeRequest, mode_per_step: bool) -> Iterator[_Event]:
    """The decode loop behind `stream` and `generate` (see `stream`).

    `mode_per_step`: enter inference mode for each step's tensor work and leave it before yielding,
    so that the caller's code between two events runs in its own mode (`stream`). False: the caller
    runs the whole loop in inference mode itself (`generate`, which saves the switch in every step).
    """
    model, chain, max_new_tokens, logprobs = request.model, request.chain, request.max_new_tokens, request.logprobs
    forward, select = compiled_step(model, chain) if request.compile else (model, chain.select)
    rows, stops = request.prompts, request.stop_tokens
    B, P = len(rows), max(len(r) for r in rows)
    # A backend whose class says it keeps every token is checked before it allocates anything.
    if getattr(getattr(request.cache, "impl", None), "keeps_all", False) is True:
        check_context(model.spec, P, max_new_tokens)
    tokenizer = request.tokenizer
    texts = [TextTracker(tokenizer, request.stop_strings) for _ in range(B)] if tokenizer is not None else None
    done = [False] * B
    if max_new_tokens == 0:
        return

    # Tensor work runs in inference mode: entered and left around each block (one mode object,
    # reused), or held by the caller throughout.
    inference = torch.inference_mode() if mode_per_step else contextlib.nullcontext()
    with inference:
        kv, buf, positions, ctx, logits = _prefill(request)

    for step in range(max_new_tokens):
        with inference:  # one block per step: the forward (after the first) and the chain
            if step > 0:
                filled = P + step  # the last column written is the token just picked
                ctx.tokens, ctx.step = buf[:, :filled], step
                if kv is None:
                    logits = uncached_last_logits(model, buf, positions, filled)
                else:
                    logits = forward(buf[:, filled - 1 : filled], positions[:, filled - 1 : filled], kv)[:, -1]
            raw = logits if logits.dtype == torch.float32 else logits.float()  # work in float32
            before = ctx.fork() if chain.may_redo else None  # where a redo of the step starts
            processed: Tensor | Candidates | None = None
            if logprobs is None:
                next_tokens = select(raw, ctx)
            else:
                processed = chain.process_fast(raw, ctx)
                next_tokens = chain.pick(processed, raw.shape[-1], ctx)
            host: list[int] = next_tokens.tolist()  # the one host read per step
            if min(host) < 0:  # -1: a row the step could not pick: redone densely; an error unless done
                next_tokens, dense = chain.resolve(raw, next_tokens, before, ctx, done)
                processed = processed if dense is None else dense
                host = next_tokens.tolist()
                next_tokens = next_tokens.clamp(min=0)  # a done row's column is never read, but is embedded
            lps = (
                None if logprobs is None or processed is None else token_logprobs(raw, processed, next_tokens, logprobs)
            )
            if P + step == buf.shape[1]:
                buf, positions = _grow(buf, positions)
            buf.select(1, P + step).copy_(next_tokens)
        last = step == max_new_tokens - 1
        for b, token in enumerate(host):
            if done[b]:
                continue
            stopped_by: int | str | None = token if token in stops[b] else None
            reason: FinishReason | None = "stop" if stopped_by is not None else ("length" if last else None)
            text = None
            if texts is not None:
                text, hit = texts[b].push(token, final=reason is not None)
                if stopped_by is not None:
                    texts[b].drop_last()
                    text = ""
                elif hit is not None:
                    reason, stopped_by = "stop", hit
            if reason is not None:
                done[b] = True
            yield b, step, token, text, reason, None if lps is None else lps[b], stopped_by
        if all(done):
            return


def stream_request(request: DecodeRequest) -> Iterator[TokenEvent]:
    """`stream` on a request already checked."""
    for event in run_loop(request, True):
        yield TokenEvent(*event)


def generate_request(request: DecodeRequest) -> Generation:
    """`generate` on a request already checked (the "sample" strategy)."""
    B = request.batch_size
    tokens: list[list[int]] = [[] for _ in range(B)]
    reasons: list[FinishReason] = ["length"] * B
    stopped_by: list[int | str | None] = [None] * B
    texts: list[list[str]] = [[] for _ in range(B)]
    lps: list[list[TokenLogprobs]] = [[] for _ in range(B)]
    with torch.inference_mode():  # for the whole loop: no code of the caller's runs in between
        for row, _, token, text, reason, token_lps, stopped in run_loop(request, False):
            tokens[row].append(token)
            if text is not None:
                texts[row].append(text)
            if token_lps is not None:
                lps[row].append(token_lps)
            if reason is not None:
                reasons[row], stopped_by[row] = reason, stopped
    return Generation(
        tokens=tokens,
        finish_reasons=reasons,
        prompt_tokens=request.prompts,
        text=["".join(t) for t in texts] if request.tokenizer is not None else None,
        logprobs=lps if request.logprobs is not None else None,
        stopped_by=stopped_by,
    )


def stream(model: Any, prompts: Prompts, **options: Unpack[DecodeOptions]) -> Iterator[TokenEvent]:
    """Yield one `TokenEvent` per row per generated token, as soon as it is sampled.

    options: chain, max_new_tokens, cache, stop_tokens, stop_strings, seed, logprobs, compile
    (`decodekit.request.DecodeOptions` says what each means and its default). Every one is
    checked before anything runs (`dk.ParameterError` naming it).
    """
    return stream_request(decode_request(model, prompts, "stream", (), **options))


def generate(model: Any, prompts: Prompts, **options: Unpack[DecodeOptions]) -> Generation:
    """Generate up to `max_new_tokens` per row; the options are `stream`'s (`DecodeOptions`).

    For a small model on CPU, `torch.set_num_threads(1)` first is often several times faster:
    its per-token work is too small to split across threads (the CLI does it below 20M parameters).
    """
    return generate_request(decode_request(model, prompts, **options))

"""The decode loop: prefill the prompt once, then one token per step against a KV cache.

`generate` returns a `Generation`; `stream` yields a `TokenEvent` per row per step.
Ragged prompts are left-padded and padding gets negative positions (see
`decodekit.models.gpt.attention_mask`), so every row of a batch decodes exactly as
it would alone. `cache="none"` recomputes the whole context every step, cropped to
the model's last `max_positions` tokens (the uncached loop of the course notes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from decodekit.cache import KVCache
from decodekit.chain import Chain, numerics_error
from decodekit.context import DecodeContext, row_generators
from decodekit.errors import ContextLengthError, ParameterError
from decodekit.plugins import create_cache
from decodekit.spec import CacheSpec, ModelSpec
from decodekit.stage import Candidates

__all__ = ["Generation", "Model", "TokenEvent", "TokenLogprobs", "Tokenizer", "generate", "stream"]

FinishReason = Literal["stop", "length"]
Prompts = str | Sequence[str] | Sequence[Sequence[int]] | Tensor


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


class Model(Protocol):
    """`model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]`, plus `model.spec`.

    A model whose `supports_last_only` is True also takes `last_only=True` and then returns only
    the last column `[B, 1, V]`; the loop asks for it wherever it reads only `[:, -1]`.
    The returned logits are the loop's: its chain may overwrite them in place, so a model must
    not keep reading a tensor it returned (a fresh output, as every PyTorch forward makes, is).
    """

    spec: ModelSpec

    def __call__(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor: ...


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """Log-probabilities of one sampled token, from the model (raw) and after the chain (processed)."""

    raw: float
    processed: float
    raw_top: list[tuple[int, float]]  # the model's n most likely tokens
    processed_top: list[tuple[int, float]]  # the n most likely after the chain


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token of one row. `text` is the new text it adds (None without a tokenizer)."""

    row: int
    step: int
    token: int
    text: str | None = None
    finish_reason: FinishReason | None = None
    logprobs: TokenLogprobs | None = None
    stopped_by: int | str | None = None  # the stop token or stop string that ended the row


@dataclass
class Generation:
    """Per row: the generated suffix (a stop token that ended the row is its last token),
    why the row stopped, and the text (stop token or stop string excluded) when there is a tokenizer."""

    tokens: list[list[int]]
    finish_reasons: list[FinishReason]
    prompt_tokens: list[list[int]]
    text: list[str] | None = None
    logprobs: list[list[TokenLogprobs]] | None = None
    stopped_by: list[int | str | None] = field(default_factory=list)  # the stop token or string


def _model_device_dtype(model: Any) -> tuple[torch.device, torch.dtype]:
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def _prompt_rows(model: Any, prompts: Prompts) -> list[list[int]]:
    if isinstance(prompts, Tensor):
        if prompts.dim() == 1:
            prompts = prompts[None]
        if prompts.dim() != 2 or prompts.dtype not in (torch.int64, torch.int32):
            raise ParameterError(f"prompts: tensor of shape {tuple(prompts.shape)}; allowed: integer [B, T]")
        rows: list[Any] = prompts.tolist()
    elif isinstance(prompts, str):
        rows = [prompts]
    else:
        rows = list(prompts)
        if rows and isinstance(rows[0], int):
            rows = [rows]
    out = []
    tokenizer = getattr(model, "tokenizer", None)
    V = model.spec.vocab_size
    for b, row in enumerate(rows):
        if isinstance(row, str):
            if tokenizer is None:
                raise ParameterError(f"prompts: row {b} is text, but the model has no tokenizer; pass token ids")
            row = tokenizer.encode(row)
        ids = [int(t) for t in row]
        if not ids:
            raise ParameterError(f"prompts: row {b} is empty; allowed: at least one token")
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise ParameterError(f"prompts: row {b} has token id {bad[0]}; allowed: 0 <= id < vocab_size={V}")
        out.append(ids)
    if not out:
        raise ParameterError("prompts: no rows; allowed: at least one prompt")
    return out


def _stop_sets(stop_tokens: Sequence[int] | Sequence[Sequence[int]], batch: int) -> list[frozenset[int]]:
    items: list[Any] = list(stop_tokens)
    if items and not isinstance(items[0], int):
        if len(items) != batch:
            raise ParameterError(
                f"stop_tokens: {len(items)} per-row lists for {batch} rows; "
                "allowed: one list for all rows or one per row"
            )
        return [frozenset(int(t) for t in row) for row in items]
    shared = frozenset(int(t) for t in items)
    return [shared] * batch


def _as_chain(chain: Chain | str | Sequence[Any] | None) -> Chain:
    if chain is None:
        return Chain()
    if isinstance(chain, Chain):
        return chain
    if isinstance(chain, str):
        return Chain.parse(chain)
    return Chain.from_spec(chain)


def _logprobs(raw: Tensor, processed: Tensor | Candidates, tokens: Tensor, n: int) -> list[TokenLogprobs]:
    """Chosen-token and top-`n` log-probabilities per row, before and after the chain."""
    raw_lp = torch.log_softmax(raw.float(), -1)
    raw_top = raw_lp.topk(n, -1) if n else None
    if isinstance(processed, Candidates):
        lse = torch.logsumexp(processed.values, -1, keepdim=True)
        hit = processed.indices == tokens[:, None]
        chosen = torch.where(hit, processed.values, float("-inf")).amax(-1) - lse[:, 0]
        top_v, top_i = (processed.values[:, :n] - lse), processed.indices[:, :n]
    else:
        lp = torch.log_softmax(processed, -1)
        chosen = lp.gather(1, tokens[:, None])[:, 0]
        top_v, top_i = lp.topk(n, -1) if n else (lp[:, :0], tokens[:, None][:, :0])
    raw_chosen = raw_lp.gather(1, tokens[:, None])[:, 0].tolist()
    out = []
    for b, token_lp in enumerate(chosen.tolist()):
        rt = list(zip(raw_top.indices[b].tolist(), raw_top.values[b].tolist())) if raw_top is not None else []
        pt = [(i, v) for i, v in zip(top_i[b].tolist(), top_v[b].tolist()) if v != float("-inf")]
        out.append(TokenLogprobs(raw_chosen[b], token_lp, rt, pt))
    return out


def left_pad(rows: Sequence[Sequence[int]], total: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """`buf [B, total]`: each prompt right-aligned at column P (the longest prompt), id 0 before it;
    `positions [B, total]`: column minus the row's padding, so negative on the padding."""
    P = max(len(r) for r in rows)
    buf = torch.zeros(len(rows), total, dtype=torch.long, device=device)
    for b, r in enumerate(rows):
        buf[b, P - len(r) : P] = torch.tensor(r, dtype=torch.long)
    pads = torch.tensor([P - len(r) for r in rows], device=device)  # [B] padding columns per row
    positions = torch.arange(total, device=device)[None, :] - pads[:, None]
    return buf, positions


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


class _TextTracker:
    """Incremental text of one row: finds stop strings across token boundaries and holds back
    text that might be the start of one, so streamed text never shows a stop string.

    Decoding is incremental (as Hugging Face's and vLLM's detokenizers do): each step decodes
    only the tokens since the last settled point, with the tokens before them as left context
    (a tokenizer may render a token differently at the start of a text), so a step costs the
    same at token 10 and at token 10,000. Text that ends in an incomplete character (U+FFFD,
    a multi-byte character split across tokens) waits for the next token.
    """

    _REPLACEMENT = "\ufffd"

    def __init__(self, tokenizer: Tokenizer, stop_strings: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stop_strings = [s for s in stop_strings if s]
        self.tokens: list[int] = []
        self.prefix = 0  # tokens[prefix:read]: the left context of the next decode
        self.read = 0  # tokens[:read] are rendered in `text`
        self.text = ""
        self.emitted = 0
        self._undo: tuple[str, int, int] = ("", 0, 0)

    def push(self, token: int, final: bool) -> tuple[str, str | None]:
        """Add a token; return (new text to show, the stop string hit or None)."""
        self.tokens.append(token)
        self._undo = (self.text, self.prefix, self.read)
        context = self.tokenizer.decode(self.tokens[self.prefix : self.read])
        window = self.tokenizer.decode(self.tokens[self.prefix :])
        if len(window) > len(context) and (final or not window.endswith(self._REPLACEMENT)):
            self.text += window[len(context) :]
            self.prefix, self.read = self.read, len(self.tokens)
        for s in self.stop_strings:
            i = self.text.find(s, max(0, self.emitted - len(s) + 1))
            if i >= 0:
                self.text = self.text[:i]
                return self._emit(len(self.text)), s
        if final:
            return self._emit(len(self.text)), None
        hold = max((k for s in self.stop_strings for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        return self._emit(len(self.text) - hold), None

    def drop_last(self) -> None:
        """Remove the last token's text (a stop token is not part of the text)."""
        self.tokens.pop()
        self.text, self.prefix, self.read = self._undo

    def _emit(self, upto: int) -> str:
        upto = max(upto, self.emitted)
        delta, self.emitted = self.text[self.emitted : upto], upto
        return delta


def stream(
    model: Any,
    prompts: Prompts,
    *,
    chain: Chain | str | Sequence[Any] | None = None,
    max_new_tokens: int = 64,
    cache: str = "dense",
    stop_tokens: Sequence[int] | Sequence[Sequence[int]] = (),
    stop_strings: Sequence[str] = (),
    seed: int | Sequence[int] | None = None,
    logprobs: int | None = None,
) -> Iterator[TokenEvent]:
    """Yield one `TokenEvent` per row per generated token, as soon as it is sampled.

    chain: a `Chain`, a chain string, or a spec list; None samples from softmax(logits).
    cache: a registered cache backend name, or "none" to recompute the context every step.
    stop_tokens: ids that end a row (one list for all rows, or one per row); the stop token
        is the row's last token. stop_strings: end a row when its decoded text contains one
        (needs a tokenizer). seed: one int (row b gets its own stream derived from it and b),
        one seed per row, or None. logprobs: also report the chosen token's log-probability
        and the top-n alternatives, raw and after the chain.
    """
    rows = _prompt_rows(model, prompts)
    events = _decode(model, rows, chain, max_new_tokens, cache, stop_tokens, stop_strings, seed, logprobs, True)
    for event in events:
        yield TokenEvent(*event)


_Event = tuple[int, int, int, str | None, FinishReason | None, TokenLogprobs | None, int | str | None]
"""`TokenEvent`'s fields as a plain tuple: what the loop yields, `stream` wraps and `generate` reads."""


def _decode(
    model: Any,
    rows: list[list[int]],
    chain_arg: Chain | str | Sequence[Any] | None,
    max_new_tokens: int,
    cache: str,
    stop_tokens: Sequence[int] | Sequence[Sequence[int]],
    stop_strings: Sequence[str],
    seed: int | Sequence[int] | None,
    logprobs: int | None,
    mode_per_step: bool,
) -> Iterator[_Event]:
    """The decode loop behind `stream` and `generate` (see `stream`), on prompts already turned into ids.

    `mode_per_step`: enter inference mode for each step's tensor work and leave it before yielding,
    so that the caller's code between two events runs in its own mode (`stream`). False: the caller
    runs the whole loop in inference mode itself (`generate`, which saves the switch in every step).
    """
    chain = _as_chain(chain_arg)
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ParameterError(f"max_new_tokens={max_new_tokens!r} is invalid; allowed: an integer >= 0")
    if logprobs is not None and not 0 <= logprobs <= model.spec.vocab_size:
        raise ParameterError(f"logprobs={logprobs!r} is invalid; allowed: 0 <= logprobs <= vocab_size")
    tokenizer: Tokenizer | None = getattr(model, "tokenizer", None)
    if stop_strings and tokenizer is None:
        raise ParameterError("stop_strings: the model has no tokenizer to decode text with; use stop_tokens")
    spec: ModelSpec = model.spec
    B, lens = len(rows), [len(r) for r in rows]
    P = max(lens)
    total = P + max_new_tokens
    device, dtype = _model_device_dtype(model)

    if cache != "none" and total > spec.max_positions:
        raise ContextLengthError(
            f"prompt of {P} tokens + max_new_tokens={max_new_tokens} = {total} tokens exceeds the model's "
            f"context of {spec.max_positions} positions; shorten the prompt, lower max_new_tokens, or use "
            "cache='none', which crops the context to the last max_positions tokens"
        )
    stops = _stop_sets(stop_tokens, B)
    texts = [_TextTracker(tokenizer, stop_strings) for _ in range(B)] if tokenizer is not None else None
    done = [False] * B
    if max_new_tokens == 0:
        return

    # Tensor work runs in inference mode: entered and left around each block (one mode object,
    # reused), or held by the caller throughout.
    inference = torch.inference_mode() if mode_per_step else contextlib.nullcontext()
    with inference:
        kv: KVCache | None = None
        if cache != "none":
            spec_ = CacheSpec.for_model(spec, batch_size=B, capacity=total, dtype=dtype, device=device)
            kv = create_cache(cache, spec_)
        # buf, positions: [B, P + max_new_tokens]; history with prompts left-padded, and each column's position.
        buf, positions = left_pad(rows, total, device)
        ctx = DecodeContext(
            tokens=buf[:, :P],
            prompt_lengths=torch.tensor(lens, device=device) if len(set(lens)) > 1 else None,
            generators=row_generators(seed, B, device),
        )
        chain.init_state(ctx)
        # Prefill: the whole prompt in one call; left padding puts every row's last token in column P-1.
        if kv is None:
            logits = uncached_last_logits(model, buf, positions, P)
        else:
            logits = model(buf[:, :P], positions[:, :P], kv, **last_only(model))[:, -1]

    for step in range(max_new_tokens):
        with inference:  # one block per step: the forward (after the first) and the chain
            if step > 0:
                filled = P + step  # the last column written is the token just picked
                ctx.tokens, ctx.step = buf[:, :filled], step
                if kv is None:
                    logits = uncached_last_logits(model, buf, positions, filled)
                else:
                    logits = model(buf[:, filled - 1 : filled], positions[:, filled - 1 : filled], kv)[:, -1]
            raw = logits if logits.dtype == torch.float32 else logits.float()  # work in float32
            if logprobs is None:
                # The step's logits are the loop's own: the chain may overwrite them. In-place
                # stages never make NaN, so a NaN left in `raw` still tells the model's NaN apart.
                next_tokens = chain.select(raw, ctx, consume=True)
                lps = None
            else:
                processed = chain.process_fast(raw, ctx)
                next_tokens = chain.pick(processed, raw.shape[-1], ctx)
                lps = _logprobs(raw, processed, next_tokens.clamp(min=0), logprobs)
            host: list[int] = next_tokens.tolist()  # the one host sync per step
            if min(host) < 0:  # -1: a row that cannot be sampled; an error unless the row is done
                bad = next((b for b, token in enumerate(host) if token < 0 and not done[b]), None)
                if bad is not None:
                    raise numerics_error(raw, chain.process(raw, ctx), bad, step)
                next_tokens = next_tokens.clamp(min=0)  # a done row's column is never read, but is embedded
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


def generate(
    model: Any,
    prompts: Prompts,
    *,
    chain: Chain | str | Sequence[Any] | None = None,
    max_new_tokens: int = 64,
    cache: str = "dense",
    stop_tokens: Sequence[int] | Sequence[Sequence[int]] = (),
    stop_strings: Sequence[str] = (),
    seed: int | Sequence[int] | None = None,
    logprobs: int | None = None,
) -> Generation:
    """Generate up to `max_new_tokens` per row; see `stream` for the parameters.

    For a small model on CPU, `torch.set_num_threads(1)` first is often several times faster:
    its per-token work is too small to split across threads (the CLI does it below 20M parameters).
    """
    rows = _prompt_rows(model, prompts)
    B = len(rows)
    tokens: list[list[int]] = [[] for _ in range(B)]
    reasons: list[FinishReason] = ["length"] * B
    stopped_by: list[int | str | None] = [None] * B
    texts: list[list[str]] = [[] for _ in range(B)]
    lps: list[list[TokenLogprobs]] = [[] for _ in range(B)]
    with torch.inference_mode():  # for the whole loop: no code of the caller's runs in between
        events = _decode(model, rows, chain, max_new_tokens, cache, stop_tokens, stop_strings, seed, logprobs, False)
        for row, _, token, text, reason, token_lps, stopped in events:
            tokens[row].append(token)
            if text is not None:
                texts[row].append(text)
            if token_lps is not None:
                lps[row].append(token_lps)
            if reason is not None:
                reasons[row], stopped_by[row] = reason, stopped
    has_text = getattr(model, "tokenizer", None) is not None
    return Generation(
        tokens=tokens,
        finish_reasons=reasons,
        prompt_tokens=rows,
        text=["".join(t) for t in texts] if has_text else None,
        logprobs=lps if logprobs is not None else None,
        stopped_by=stopped_by,
    )

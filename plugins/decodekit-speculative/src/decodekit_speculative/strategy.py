"""The `speculative` strategy: a draft proposes up to `k` tokens per row, the target scores them all in
one forward, and the rejection rule (`decodekit_speculative.rejection`) keeps a prefix and adds one
token of its own: output distributed exactly as `dk.generate`'s with the same chain, and for an
"argmax" chain token for token the same.

Each round, per row: the draft proposes from the chain's distribution on the draft's logits; the
target's block is the row's last token and its drafts; the chain runs at every drafted position on
the history it would see without speculation (the row's tokens plus the drafts before it, `step`
counted the same). Rows keep their own number of tokens per round (`decodekit_speculative.row_cache`);
each row's randomness comes from its own generator, so its output does not depend on its batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor

from decodekit.cache import RowCroppable
from decodekit.chain import numerics_error
from decodekit.context import DecodeContext, row_generators
from decodekit.errors import ContextLengthError, NumericsError, ParameterError
from decodekit.loop import model_device_dtype
from decodekit.params import Params, validate_params
from decodekit.plugins import CacheFactory, cache_factory, load_model
from decodekit.request import DecodeRequest, decode_request
from decodekit.results import FinishReason, Generation
from decodekit.spec import CacheSpec
from decodekit.stage import Candidates, densify
from decodekit.text import TextTracker
from decodekit_speculative.drafts import Drafter, ModelDrafter, NgramDrafter, fed_block
from decodekit_speculative.params import NGRAM, SpeculativeParams
from decodekit_speculative.rejection import draw, probabilities, verify_argmax, verify_softmax
from decodekit_speculative.row_cache import RowCache
from decodekit_speculative.safety import speculation_kind

__all__ = ["SpeculativeGeneration", "resolve_draft", "speculative", "speculative_strategy"]


@dataclass
class SpeculativeGeneration(Generation):
    """A `Generation` plus, per row, how many tokens the draft proposed and how many the target accepted."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / proposed drafts over all rows (0 when nothing was proposed)."""
        total = sum(self.drafted)
        return sum(self.accepted) / total if total else 0.0


def resolve_draft(draft: object, target: Any) -> Any | None:
    """The draft model for `draft` (a registered name or a model object); None for "ngram"."""
    model = (None if draft == NGRAM else load_model(draft)) if isinstance(draft, str) else draft
    if model is None:
        return None
    spec = getattr(model, "spec", None)
    if spec is None or not callable(model):
        raise ParameterError(
            f"speculative: draft={draft!r} is invalid; allowed: a registered model name, a model object, or 'ngram'"
        )
    if spec.vocab_size != target.spec.vocab_size:
        raise ParameterError(
            f"speculative: draft={draft!r} has a vocabulary of {spec.vocab_size} tokens, the target "
            f"{target.spec.vocab_size}; allowed: a draft sharing the target's vocabulary"
        )
    mine, theirs = getattr(model, "tokenizer", None), getattr(target, "tokenizer", None)
    if mine is not None and theirs is not None:
        ids = list(range(min(spec.vocab_size, 4096)))
        if mine.decode(ids) != theirs.decode(ids):
            raise ParameterError(
                f"speculative: draft={draft!r} has a tokenizer that decodes token ids differently from the "
                "target's; allowed: a draft sharing the target's vocabulary"
            )
    return model


def speculative(model: Any, prompts: Any, **options: Any) -> SpeculativeGeneration:
    """`dk.decode(model, prompts, strategy="speculative", **options)`, without the registry.

    draft: a registered model name, a model object sharing the target's vocabulary, or "ngram"
    (prompt lookup of the last `ngram_size` tokens). k: tokens proposed per row and round. The
    other options are `dk.generate`'s.
    """
    own = {key: options.pop(key) for key in list(options) if key in SpeculativeParams.model_fields}
    params = validate_params("strategy speculative", SpeculativeParams, own)
    request = decode_request(model, prompts, "speculative", tuple(SpeculativeParams.model_fields), **options)
    return speculative_strategy(request, params)


def speculative_strategy(request: DecodeRequest, params: Params) -> SpeculativeGeneration:
    """The registered strategy: `impl(request, params)` (see `decodekit.hookspecs`)."""
    assert isinstance(params, SpeculativeParams)
    model = request.model
    if request.logprobs is not None:
        raise ParameterError(f"speculative: logprobs={request.logprobs!r} is not supported; allowed: None")
    if request.compile:
        raise ParameterError("speculative: compile=True is not supported; allowed: False")
    if request.cache is None:
        raise ParameterError(
            "speculative: cache='none' is invalid; allowed: a cache backend (rejected drafts are cropped)"
        )
    rows = request.prompts
    P, N = max(len(r) for r in rows), request.max_new_tokens
    total = P + N
    if total > model.spec.max_positions:  # (dk.generate's message would suggest cache='none')
        raise ContextLengthError(
            f"speculative: prompt of {P} tokens + max_new_tokens={N} exceeds the model's context of "
            f"{model.spec.max_positions} positions; shorten the prompt or lower max_new_tokens"
        )
    loop = _Loop(model, resolve_draft(params.draft, model), params, request)
    generators = row_generators(request.seed, len(rows), loop.device)
    with torch.inference_mode():
        if len(rows) > 1 and not loop.rows_croppable():
            # A cache that cannot crop rows unevenly: each row alone (its output is the same either way).
            parts = [loop.run([r], [g], [s]) for r, g, s in zip(rows, generators, request.stop_tokens)]
            return _merge(parts, rows)
        return loop.run(rows, generators, request.stop_tokens)


def _merge(parts: list[SpeculativeGeneration], rows: list[list[int]]) -> SpeculativeGeneration:
    def cat(name: str) -> list[Any]:
        return [x for part in parts for x in getattr(part, name)]

    return SpeculativeGeneration(
        tokens=cat("tokens"),
        finish_reasons=cat("finish_reasons"),
        prompt_tokens=rows,
        text=cat("text") if parts[0].text is not None else None,
        stopped_by=cat("stopped_by"),
        drafted=cat("drafted"),
        accepted=cat("accepted"),
    )


class _Loop:
    """One decode: the models, chain and options; `run` decodes a batch of prompts."""

    def __init__(self, model: Any, draft: Any | None, params: SpeculativeParams, request: DecodeRequest) -> None:
        self.model, self.draft, self.chain, self.params = model, draft, request.chain, params
        self.N, self.tokenizer, self.stop_strings = request.max_new_tokens, request.tokenizer, request.stop_strings
        assert request.cache is not None
        self.cache_factory: CacheFactory = request.cache
        self.device, self.dtype = model_device_dtype(model)
        self.V = model.spec.vocab_size
        # Without processors the chain's distribution needs no context: every row and position at once.
        self.dense = not self.chain.processors

    def _cache(self, model: Any, batch: int, capacity: int, factory: CacheFactory | None = None) -> Any:
        device, dtype = model_device_dtype(model)
        capacity = min(capacity, model.spec.max_positions)
        spec = CacheSpec.for_model(model.spec, batch_size=batch, capacity=capacity, dtype=dtype, device=device)
        return (factory or self.cache_factory)(spec)

    def _draft_cache(self, batch: int, capacity: int) -> Any:
        """The target's backend for the draft if it keeps every token, else `gqa`: the draft reads the same
        history within the target's context, and a draft whose state cannot be evicted (a recurrent one)
        needs all of it. What the draft keeps changes how often it is right, never the output."""
        declared = getattr(getattr(self.cache_factory, "impl", None), "keeps_all", None)
        if declared is not False:  # a registered backend says so by its class; any other factory is built
            cache = self._cache(self.draft, batch, capacity)
            if getattr(cache, "keeps_all", False):
                return cache
        return self._cache(self.draft, batch, capacity, cache_factory("gqa"))

    def rows_croppable(self) -> bool:
        caches = [self._cache(self.model, 2, 2)] + ([] if self.draft is None else [self._draft_cache(2, 2)])
        return all(isinstance(cache, RowCroppable) for cache in caches)

    def run(
        self, rows: list[list[int]], generators: list[torch.Generator], stops: list[frozenset[int]]
    ) -> SpeculativeGeneration:
        B, N, k, chain = len(rows), self.N, self.params.k, self.chain
        lengths = [len(r) for r in rows]  # history (prompt + emitted) per row
        P = max(lengths)
        width = P + N + k + 2
        kv = RowCache(self._cache(self.model, B, width), B)
        capacity = kv.cache.capacity
        drafter: Drafter = (
            NgramDrafter(rows, self.params.ngram_size)
            if self.draft is None
            else ModelDrafter(self.draft, self._draft_cache(B, width), B)
        )
        buf = torch.zeros(B, width, dtype=torch.long, device=self.device)  # row b's history in buf[b, :lengths[b]]
        for b, r in enumerate(rows):
            buf[b, : len(r)] = torch.tensor(r)
        ctxs = [DecodeContext(tokens=buf[b : b + 1, : lengths[b]], generators=[g]) for b, g in enumerate(generators)]
        for ctx in ctxs:
            chain.init_state(ctx)
        kind = speculation_kind(chain, ctxs[0])
        out = _Outputs(B, rows, self.tokenizer, self.stop_strings)
        generated = [0] * B
        done = [N == 0] * B

        def context(b: int, j: int) -> DecodeContext:
            """Row b's context at drafted position j: its history, the j drafts before, the step it would be."""
            ctx = ctxs[b]
            ctx.tokens, ctx.step = buf[b : b + 1, : lengths[b] + j], generated[b] + j
            return ctx

        def processed(logits: Tensor, b: int, j: int) -> Tensor:
            if self.dense:
                return logits[None]
            x = chain.process_fast(logits[None], context(b, j))
            return densify(x, self.V) if isinstance(x, Candidates) else x

        def argmax(logits: Tensor, b: int, j: int, who: str) -> int:
            x = processed(logits, b, j)
            top, index = x.max(-1)  # the first maximum, as argmax; NaN if any is NaN
            if not math.isfinite(float(top)):
                raise _numerics(logits, x, b, generated[b] + j, who)
            return int(index)

        def pick(b: int, j: int, logits: Tensor) -> tuple[int, Tensor | None]:
            if kind == "argmax":
                return argmax(logits, b, j, "draft"), None
            q = probabilities(processed(logits, b, j))[0]
            token = draw(q, ctxs[b].uniform())
            if token < 0:
                raise _numerics(logits, processed(logits, b, j), b, generated[b] + j, "draft")
            return token, q

        while not all(done):
            active = [not d for d in done]
            room = capacity - max(n for n, a in zip(lengths, active) if a)  # the target's block must fit
            budgets = [min(k, N - generated[b] - 1, room) if active[b] else 0 for b in range(B)]
            qs = drafter.propose(buf, lengths, budgets, active, pick)
            counts = [len(q) for q in qs]
            F = kv.prepare(lengths, active)
            lengths_t = torch.tensor(lengths, device=self.device)
            ids, positions = fed_block(buf, lengths_t, F, F + max(counts), self.model.spec.max_positions)
            logits = self.model(ids, positions, kv.cache)[:, F - 1 :]  # [B, W + 1, V]: column j predicts lengths + j
            if logits.dtype != torch.float32:
                logits = logits.float()
            target = self._target(kind, logits, processed, argmax, generated)
            for b in range(B):
                if done[b]:
                    continue
                drafts: list[int] = buf[b, lengths[b] : lengths[b] + counts[b]].tolist()
                at = partial(target, b)  # the target's pick (argmax) or probabilities at row b's position j
                if kind == "argmax":
                    n, token = verify_argmax(drafts, at)
                else:
                    n, token = verify_softmax(drafts, qs[b], at, ctxs[b].uniform)
                    if token < 0:
                        x = processed(logits[b, n], b, n)
                        raise _numerics(logits[b, n], x, b, generated[b] + n, "target")
                out.drafted[b] += counts[b]
                out.accepted[b] += n
                kv.commit(b, lengths[b] + n)
                drafter.rollback(b, n)
                buf[b, lengths[b] + n] = token
                for t in (*drafts[:n], token):
                    generated[b] += 1
                    lengths[b] += 1
                    if out.push(b, t, stops[b], last=generated[b] == N):
                        done[b] = True
                        break
        return out.generation()

    def _target(
        self,
        kind: str,
        logits: Tensor,
        processed: Callable[[Tensor, int, int], Tensor],
        argmax: Callable[[Tensor, int, int, str], int],
        generated: list[int],
    ) -> Callable[[int, int], Any]:
        """`target(b, j)`: the target's argmax token or probabilities at row b's drafted position j."""
        if self.dense:  # one op for every row and position
            if kind == "argmax":
                top = logits.argmax(-1)
                finite = torch.isfinite(logits.gather(-1, top[..., None]))[..., 0].tolist()
                tokens = top.tolist()

                def dense_argmax(b: int, j: int) -> int:
                    if not finite[b][j]:
                        raise _numerics(logits[b, j], logits[b, j][None], b, generated[b] + j, "target")
                    return int(tokens[b][j])

                return dense_argmax
            probs = probabilities(logits)
            return lambda b, j: probs[b, j]
        if kind == "argmax":
            return lambda b, j: argmax(logits[b, j], b, j, "target")
        return lambda b, j: probabilities(processed(logits[b, j], b, j))[0]


def _numerics(raw: Tensor, processed: Tensor, row: int, step: int, who: str) -> NumericsError:
    """The decode loop's diagnosis for row `row` (whose logits are `raw` `[V]`), naming the model."""
    error = numerics_error(raw[None].expand(row + 1, -1), processed.expand(row + 1, -1), row, step)
    return NumericsError(f"speculative ({who} model): {error}")


class _Outputs:
    """What each row emitted, and the stop rules of `dk.generate` applied token by token."""

    def __init__(self, batch: int, rows: list[list[int]], tokenizer: Any, stop_strings: Sequence[str]) -> None:
        self.rows = rows
        self.tokens: list[list[int]] = [[] for _ in range(batch)]
        self.reasons: list[FinishReason] = ["length"] * batch
        self.stopped_by: list[int | str | None] = [None] * batch
        self.texts = [TextTracker(tokenizer, stop_strings) for _ in range(batch)] if tokenizer is not None else None
        self.pieces: list[list[str]] = [[] for _ in range(batch)]
        self.drafted = [0] * batch
        self.accepted = [0] * batch

    def push(self, b: int, token: int, stops: frozenset[int], last: bool) -> bool:
        """Record row b's next token; True when it ends the row."""
        self.tokens[b].append(token)
        stopped_by: int | str | None = token if token in stops else None
        reason: FinishReason | None = "stop" if stopped_by is not None else ("length" if last else None)
        if self.texts is not None:
            text, hit = self.texts[b].push(token, final=reason is not None)
            if stopped_by is not None:
                self.texts[b].drop_last()
                text = ""
            elif hit is not None:
                reason, stopped_by = "stop", hit
            self.pieces[b].append(text)
        if reason is None:
            return False
        self.reasons[b], self.stopped_by[b] = reason, stopped_by
        return True

    def generation(self) -> SpeculativeGeneration:
        return SpeculativeGeneration(
            tokens=self.tokens,
            finish_reasons=self.reasons,
            prompt_tokens=self.rows,
            text=["".join(p) for p in self.pieces] if self.texts is not None else None,
            stopped_by=self.stopped_by,
            drafted=self.drafted,
            accepted=self.accepted,
        )

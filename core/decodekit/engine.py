"""The decode engine, `Decoding`: one object that owns everything a decode needs, whatever the policy; a strategy
is a policy over it (docs/concepts.md, "The decode engine"; every member: docs/strategies.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, cast

import torch
from torch import Tensor

from decodekit import compiling
from decodekit.cache import KVCache, capability_error, evicts
from decodekit.chain import Chain, Picked
from decodekit.context import DecodeContext, row_generators, row_seeds
from decodekit.copies import CopiesView, distinct_rows
from decodekit.errors import ContextLengthError, ParameterError, PluginError, UnfinishedRowsWarning
from decodekit.model import Model, last_only, model_device_dtype
from decodekit.outputs import RowOutput
from decodekit.params import Params
from decodekit.prefix import Groups, prefill_prefixes, shared_prefixes
from decodekit.prompts import left_pad, tokenizer_ids
from decodekit.request import DecodeRequest
from decodekit.results import Generation, PromptLogprobs, TokenEvent, prompt_logprobs
from decodekit.spec import CacheSpec, ModelSpec
from decodekit.storage import device_memory
from decodekit.text import TextTracker
from decodekit.threads import decode_threads, threads
from decodekit.training_mode import warn_if_training

__all__ = [
    "PREALLOCATED_COLUMNS",
    "WARNED_KEPT",
    "Decoding",
    "Policy",
    "block_starts",
    "check_rows",
    "sample_steps",
]

PREALLOCATED_COLUMNS = 4096
"""New-token columns of history allocated up front; more are added by doubling, so a huge
`max_new_tokens` (a generation meant to end on a stop token) allocates only what it uses."""

SIZE_STEP = 64
"""Under `compile=True` the history's columns and a cache's capacity (one that keeps every token) are a multiple
of this: decodes of nearby lengths present the compiled forward the same sizes and strides, so share its graph."""

ROW_BYTES = 2048
"""Memory a row takes at least, whatever its length: its random generator, output and text (about 3 KB on a CPU)."""

WARNED_KEPT = 64
"""The most texts of the unfinished rows' warning remembered (for the default filter's once per text and line); more
and they are forgotten, so a text seen again is shown again."""

Policy = Callable[["Decoding", Params], "Iterator[None] | None"]
_END = object()  # a policy's rounds are over
_OPENED = frozenset({"P", "total", "rows", "kv", "buf", "positions", "width", "ctx", "outputs", "call_model"})
# The texts warned of unfinished rows, as `warnings.warn` remembers them in the module's `__warningregistry__`, which
# Python never empties: the rows named differ from decode to decode, so a service's grew by a text a decode.
_warned: dict[Any, Any] = {}


def block_starts(width: int, block: int) -> list[int]:
    """The first columns of blocks of at most `block` that cut `width` left-padded columns, the last block ending at
    `width`: every row ends there, so where a row's prompt is cut depends on its own length, not on its batch's."""
    return [max(0, start) for start in range(width - -(-width // block) * block, width, block)]


def _how_to_fit(context: int, length: int, new: int) -> str:
    """How a prompt of `length` tokens and `new` more would fit a `context` of positions: the change, its number."""
    if length < context:
        return f"lower max_new_tokens to {context - length} or fewer (the context less the prompt's {length} tokens)"
    if new < context:
        return f"shorten the prompt to {context - new} tokens or fewer (the context less max_new_tokens={new})"
    return f"shorten the prompt and lower max_new_tokens: together at most {context} tokens"


class Decoding:
    """One decode of a batch of prompts, driven by a strategy's policy (its members: docs/strategies.md). The rows
    are left-padded to a common width `P` in `buf` `[R, C]` (C: at least `width`, up to P + 4096 new columns up
    front, doubled as they fill); `width` columns are filled, every row's last token in column `width - 1`."""

    def __init__(self, request: DecodeRequest, strategy: str = "sample", *, events: bool = True) -> None:
        self.request = request
        self.strategy = strategy
        self.model: Model = request.model
        self.spec = request.model.spec  # read once: a model may build its spec on every access
        self.chain: Chain = request.chain.compiled() if request.compile else request.chain
        self.prompts = request.prompts
        self.device, self.dtype = model_device_dtype(request.model)
        self.result_type: type[Generation] = Generation  # a policy may return a subclass ...
        self.extras: dict[str, list[Any]] = {}  # ... with these per-prompt fields
        self._events: list[TokenEvent] | None = [] if events else None
        self._finished: list[RowOutput | None] = [None] * len(request.prompts)
        # per prompt, once `prefill` has run with `prompt_logprobs` (a policy prefilling otherwise may set them)
        self.prompt_logprobs: list[list[PromptLogprobs | None]] | None = None
        self.copies = 0  # set by `open`
        self._fed = 0  # the history columns the last prefill() or forward() fed the model

    # -- set-up ----------------------------------------------------------------------------

    def open(
        self,
        *,
        copies: int = 1,
        lookahead: int = 0,
        needs: Sequence[str] = (),
        recompute: bool = True,
        copies_option: str = "copies",
    ) -> None:
        """Build the rows, the cache and the history; a policy calls it once, before anything else. What each
        argument asks for: docs/strategies.md ("Adding a strategy from a plugin")."""
        if self.copies:
            raise PluginError(f"strategy {self.strategy}: opened its decoding twice")
        request = self.request
        self.P = P = max(len(p) for p in self.prompts)
        self.total = P + request.max_new_tokens + lookahead
        columns = self._sized(P + min(self.total - P, PREALLOCATED_COLUMNS))
        option = (copies_option, copies) if copies > 1 else ("batch size", len(self.prompts))
        scored = 0 if request.prompt_logprobs is None else min(P, self.spec.max_positions)  # a prefill's block
        check_rows(f"strategy {self.strategy}", *option, len(self.prompts) * copies, columns, self.model, scored)
        self.copies, self._recompute = copies, recompute
        self.rows = [p for p in self.prompts for _ in range(copies)]
        lens = [len(r) for r in self.rows]
        self.kv = self.open_cache(self.model, len(self.rows), self.total, needs)
        self.buf, self.positions = left_pad(self.rows, columns, self.device)
        self.width = P
        self.ctx = DecodeContext(
            tokens=self.buf[:, :P],
            prompt_lengths=torch.tensor(lens, device=self.device) if len(set(lens)) > 1 else None,
            generators=row_generators(row_seeds(request.seed, len(self.prompts), copies), len(self.rows), self.device),
            tokenizer=request.tokenizer,
            prompt_index=None if copies == 1 else [r // copies for r in range(len(self.rows))],
        )
        self.chain.init_state(self.ctx)
        self.outputs = [self._output(r // copies, r) for r in range(len(self.rows))]
        self.call_model = self.runs(self.model)

    def _sized(self, n: int) -> int:
        """`n` slots or columns, rounded up to a multiple of `SIZE_STEP` under `compile=True`."""
        return -(-n // SIZE_STEP) * SIZE_STEP if self.request.compile else n

    def runs(self, model: Model) -> Callable[..., Tensor]:
        """`model` as this decode calls it: under `torch.compile` with `compile=True` (a policy's own forwards,
        a draft model's, go through this too), else as it is (`compiling.compiled_forward`); warned about where
        its dropout is in training mode."""
        warn_if_training(model)
        return compiling.compiled_forward(model) if self.request.compile else model

    def open_cache(self, model: Model, batch_size: int, total: int, needs: Sequence[str] = ()) -> KVCache | None:
        """A cache of the request's backend for `model`, `batch_size` rows of up to `total` tokens, checked
        for the capabilities `needs`, against the model's context and by the model's `validate_cache`; None for
        `cache="none"`."""
        factory = self.request.cache
        if factory is None:  # recomputed every step, cropped to the model's context: any length
            return None
        spec = model.spec
        impl = getattr(factory, "impl", None)
        # A registered class states whether it evicts; a registered function (one that picks a class) says so
        # only through the cache it makes, checked below.
        keeps_every_token = isinstance(impl, type) and not evicts(impl)
        if keeps_every_token:  # check before allocating any
            self._check_reach(spec, None)
        capacity = self._sized(total) if keeps_every_token else total  # more slots: never fed
        asked = CacheSpec.for_model(
            spec, batch_size=batch_size, capacity=capacity, dtype=self.dtype, device=self.device
        )
        kv = _allocate(factory, asked)
        for need in needs:
            if (error := capability_error(kv, need, self.strategy)) is not None:
                raise error
        self._check_reach(spec, kv)
        if callable(check := getattr(model, "validate_cache", None)):  # its own rules (docs/concepts.md, Models)
            check(kv, self._furthest()[0])
        return kv

    def _furthest(self) -> tuple[int, str, int]:
        """The positions the furthest-reaching prompt needs, its own length + its own limit (rows are left-padded,
        each from position 0: the slots `total` may pass the context where no row's positions do), its words, and
        its length."""
        request, many = self.request, len(self.prompts) > 1
        n, b = max((len(p) + request.limit(b), b) for b, p in enumerate(self.prompts))
        limit = f"max_new_tokens{f'[{b}]' if request.limits is not None else ''}={request.limit(b)}"
        length = len(self.prompts[b])
        return n, f"prompt{f' {b}' if many else ''} of {length} tokens + {limit} = {n} tokens", length

    def _check_reach(self, spec: ModelSpec, kv: KVCache | None) -> None:
        """The widest query-key distance any row presents must be one the model knows; past the context, only
        rotary keys can move (an evicting cache keeps absolute positions no further)."""
        needed, words, length = self._furthest()
        to_fit = _how_to_fit(spec.max_positions, length, needed - length)
        if kv is not None and evicts(kv):
            # first: no cache takes absolute positions further, however little it reaches
            if not spec.movable_keys and needed > spec.max_positions:
                none = "cache='none' (it crops the context) or " if self._crops_serve(spec) else ""
                raise ContextLengthError(
                    f"{words} exceeds the model's context of {spec.max_positions} positions, and "
                    f"{spec.rope_note or 'its positions are absolute (not rotary)'}: an evicting cache cannot take it "
                    f"further; use {none}fewer tokens: {to_fit}"
                )
            if (reach := kv.reach(needed)) > spec.max_positions:  # type: ignore[attr-defined]
                raise ContextLengthError(  # name the call: a plugin's reach may be what is wrong
                    f"cache {self.request.cache}: reach({needed}) = {reach} for the {words}: a query would attend "
                    f"across {reach} positions, past the model's context of {spec.max_positions}; allowed: a cache "
                    "whose window fits the context (reach(n) bounds the distances of n more tokens fed in any blocks)"
                )
        elif needed > spec.max_positions:
            none = ", or cache='none', which crops the context" if self._crops_serve(spec) else ""
            size = '"auto"' if spec.attention_windows is not None or spec.calibration is not None else "N"
            evict = f", or use a cache that evicts (cache='window(size={size})')" if spec.movable_keys else ""
            raise ContextLengthError(
                f"{words} exceeds the model's context of {spec.max_positions} positions; "
                f"{'shorten the prompt, ' if length < spec.max_positions else ''}{to_fit}{evict}{none}"
            )

    def _crops_serve(self, spec: ModelSpec) -> bool:
        """Whether cache='none', which crops the context, would serve this decode: the strategy recomputes, and
        prompt_logprobs, which need each whole prompt in one forward, are not asked past the context."""
        longest = max(map(len, self.prompts))
        return self._recompute and (self.request.prompt_logprobs is None or longest <= spec.max_positions)

    # -- the model ------------------------------------------------------------------------

    def prefill(self) -> Tensor:
        """Logits `[R, V]` after each row's prompt (left padding puts every row's last token in column P-1); through
        a cache that evicts, in blocks of at most the model's context ending at column P (`block_starts`), so a long
        prompt needs bounded memory and is cut alike in any batch; a
        prompt's copies and the prefixes the prompts share, once (`decodekit.copies`, `decodekit.prefix`). With
        `prompt_logprobs`, every column's logits, scored into `self.prompt_logprobs`."""
        n = self.request.prompt_logprobs
        if self._fed:  # a draft's slip the cache would report as its capacity
            raise PluginError(
                f"strategy {self.strategy}: prefill() called twice; allowed: one prefill, first, then forward() once "
                "per column appended"
            )
        if self.kv is None and n is None:
            self._fed = self.P
            return uncached_logits(self.model, self.buf, self.positions, self.P)
        self._fed = self.P  # (after reading kv: before open(), that is the error a policy gets)
        # without a cache the prompt fits the context (`decode_request` checked): one block, its positions as they are
        block = self.spec.max_positions if evicts(self.kv) else self.P
        columns = last_only(self.model) if n is None else {}
        tokens, positions, kv, copies = self.buf[:, : self.P], self.positions[:, : self.P], self.kv, None
        alike = None if self.kv is None else distinct_rows(tokens, positions)
        distinct = self.rows if alike is None else [self.rows[i] for i in alike[0].tolist()]
        # a model whose forward's extent changes its logits gets each prompt whole
        if self.spec.splittable and (groups := shared_prefixes(self.kv, distinct)) is not None:
            return self._prefill_prefix(distinct, alike, groups, n)
        if alike is not None:
            first, copies = alike  # a prompt's copies (samples, beams) computed once
            tokens, positions, kv = tokens[first], positions[first], CopiesView(cast(KVCache, self.kv), first, copies)
        starts = block_starts(self.P, block)
        for start, end in zip(starts, [*starts[1:], self.P]):
            logits = self.model(tokens[:, start:end], positions[:, start:end], kv, **columns)
            last = last_column(self.model, logits)
            if n is not None:
                self._score_prompts(logits, start, n, copies)
        return last if copies is None else last[copies]

    def _prefill_prefix(
        self, distinct: list[list[int]], alike: tuple[Tensor, Tensor] | None, groups: Groups, n: int | None
    ) -> Tensor:
        """`prefill` of `distinct` prompts by the prefixes their `groups` share, each computed once
        (`decodekit.prefix`): each row's logits are its own suffix's last column."""
        assert self.kv is not None  # `shared_prefixes` shares through a cache only
        prefix, suffixes = prefill_prefixes(self.model, self.kv, distinct, alike, groups, scored=n is not None)
        last_column(self.model, prefix)  # checks both as the unshared prefill checks its logits
        last = last_column(self.model, suffixes)  # without prompt_logprobs, each row's last column
        copies = None if alike is None else alike[1]
        if n is not None:  # every column: each row's last is its own
            ends = torch.tensor([len(p) - groups.prefix(i) - 1 for i, p in enumerate(distinct)], device=suffixes.device)
            last = suffixes[torch.arange(len(distinct), device=suffixes.device), ends]
            self._score_shared(prefix, suffixes, distinct, groups, n, copies)
        return last if copies is None else last[copies]

    def _score_shared(
        self, prefix: Tensor, suffixes: Tensor, distinct: list[list[int]], groups: Groups, n: int, copies: Tensor | None
    ) -> None:
        """`prompt_logprobs` from a shared prefill: each group's prefix logits (row g of `prefix` `[G, W, V]`, its
        last columns), scored once for the tokens its members share, then each prompt's own, from its prefix's
        last column on (`_score_prompts`' words)."""
        heads = [prefix[g, groups.width - c :] for g, c in enumerate(groups.prefixes)]  # [C, V] each
        shared = [
            prompt_logprobs(head[: c - 1], torch.tensor(distinct[first][1:c], dtype=torch.long, device=head.device), n)
            for head, first, c in zip(heads, groups.firsts, groups.prefixes)
        ]
        self.prompt_logprobs = []
        for b, prompt in enumerate(self.prompts):
            row = b * self.copies
            at = row if copies is None else int(copies[row])
            g, c = groups.of[at], groups.prefix(at)
            own = len(prompt) - max(c, 1)  # the tokens its prefix's last column on predict (an empty prefix: none)
            logits = torch.cat([heads[g][-1:], suffixes[at, : len(prompt) - c - 1]])
            mine = [dataclasses.replace(e, top=list(e.top)) for e in shared[g]]  # each prompt's own, as unshared
            own_scores = prompt_logprobs(logits, self.buf[row, self.P - own : self.P], n)
            self.prompt_logprobs.append([None, *mine, *own_scores])

    def _score_prompts(self, logits: Tensor, start: int, n: int, copies: Tensor | None) -> None:
        """Add to `prompt_logprobs` the prompt tokens the logits `[R, T, V]` of columns `start ..` predict: each
        prompt's own columns (one row per prompt: its copies are the same), never its padding. `copies`: each row's
        among the logits' rows where a prompt's copies were computed once (`distinct_rows`), read in place."""
        if start == 0:
            self.prompt_logprobs = [[None] for _ in self.prompts]
        assert self.prompt_logprobs is not None
        for b, scores in enumerate(self.prompt_logprobs):
            row, first = b * self.copies, self.P - len(self.prompts[b])  # the prompt's first column
            lo, hi = max(start, first), min(start + logits.shape[1], self.P - 1)  # columns that predict a token
            at = row if copies is None else int(copies[row])
            if lo < hi:
                scores += prompt_logprobs(logits[at, lo - start : hi - start], self.buf[row, lo + 1 : hi + 1], n)

    def forward(self) -> Tensor:
        """Logits `[R, V]` after the last column written (the token `advance` or `append` just wrote)."""
        w = self.width
        if self.kv is None:
            return uncached_logits(self.model, self.buf, self.positions, w)
        if w > self.total:  # the cache would refuse, blaming its capacity
            raise PluginError(
                f"strategy {self.strategy}: forward() would feed column {w - 1}, past the decoding's {self.total} "
                f"columns (the prompts' {self.P} + max_new_tokens={self.request.max_new_tokens} + lookahead "
                f"{self.total - self.P - self.request.max_new_tokens}); allowed: stop once decoding.done, or "
                "open(lookahead=...) for tokens fed past max_new_tokens"
            )
        if self._fed == w:  # not the cache's length: a model may feed fewer layers than its spec states
            raise PluginError(
                f"strategy {self.strategy}: forward() would feed column {w - 1} again (the last prefill or forward "
                "fed it); allowed: one forward() per column appended (advance or append first)"
            )
        self._fed = w
        positions = self.positions[:, w - 1 : w]
        spec = self.spec  # past the context (but rotary keys an evicting cache moves) only ended rows (`_furthest`):
        if self.total > spec.max_positions and (not spec.movable_keys or not evicts(self.kv)):
            positions = positions.clamp(max=spec.max_positions - 1)  # their tokens are never emitted
        logits: Tensor = self.call_model(self.buf[:, w - 1 : w], positions, self.kv)
        return logits[:, -1]

    # -- the chain and the history ----------------------------------------------------------

    def room(self, length: int) -> int:
        """Tokens a row of `length` may still feed: up to `total`, and within the model's context unless the
        cache evicts (a look-ahead past the context would present positions the model never saw)."""
        limit = self.total if evicts(self.kv) else min(self.total, self.spec.max_positions)
        return limit - length

    @property
    def live(self) -> list[bool]:
        """Per row: True while it has not ended."""
        return [not out.done for out in self.outputs]

    @property
    def done(self) -> bool:
        return all(out.done for out in self.outputs)

    def pick(self, logits: Tensor, *, logprobs: int | None = None) -> Picked:
        """The chain's step on every row (`Chain.step`); `logprobs`, or the request's, also reports them."""
        n = self.request.logprobs if logprobs is None else logprobs
        chain = self.chain
        if self.request.compile and self.ctx.step == 0:  # eager: counts the uniforms a step takes (`ctx.drawn`)
            chain = self.request.chain
        elif self.request.compile:  # as many as the last step took: a draw inside the graph would split it
            self._draw_ahead(max(1, self.ctx.drawn))
        return chain.step(logits, self.ctx, live=self.live, logprobs=n)

    def _draw_ahead(self, n: int) -> None:
        """`n` uniforms per row for the next step, those the last step left first: they are the rows' next numbers,
        so the draws stay eager's when a step takes fewer than the one before (lost, they shifted every later one)."""
        ctx = self.ctx
        left = None if ctx.draws is None else ctx.draws[:, ctx.drawn :]
        if left is None or left.shape[1] == 0:
            ctx.draw_uniforms(n)
        elif left.shape[1] >= n:
            ctx.draws, ctx.drawn = left, 0
        else:
            left = left.clone()  # it views the last tensor, which the draw may refill
            ctx.draw_uniforms(n - left.shape[1])
            ctx.draws = torch.cat([left, cast(Tensor, ctx.draws)], 1)

    def append(self, tokens: Tensor) -> None:
        """Write one token per row `[R]` as the next history column."""
        if self.width == self.buf.shape[1]:  # full: twice the columns, positions continuing one per column
            more = self.positions[:, -1:] + torch.arange(1, self.width + 1, device=self.device)
            self.buf = torch.cat([self.buf, torch.zeros_like(self.buf)], 1)
            self.positions = torch.cat([self.positions, more], 1)
        self.buf.select(1, self.width).copy_(tokens)
        self.width += 1
        self.ctx.tokens, self.ctx.step = self.buf[:, : self.width], self.width - self.P

    def advance(self, picked: Picked) -> None:
        """Append the picked tokens and emit each live row's."""
        self.append(picked.tokens)
        for row, token in enumerate(picked.ids):
            if not self.outputs[row].done:
                self.emit(row, token, None if picked.logprobs is None else picked.logprobs[row])

    def reorder(self, index: Sequence[int]) -> None:
        """Row `i` becomes a copy of row `index[i]`: its history, cache entries and output (beam search)."""
        R = len(self.outputs)
        if len(index) != R or not all(0 <= i < R for i in index):  # `cache="none"` would take any rows silently
            raise PluginError(
                f"strategy {self.strategy}: reorder({list(index)}) is invalid; allowed: {R} row indices, each in "
                f"[0, {R})"
            )
        rows = torch.tensor(index, device=self.device)
        self.buf, self.positions = self.buf.index_select(0, rows), self.positions.index_select(0, rows)
        self.ctx.tokens = self.buf[:, : self.width]
        if self.kv is not None:
            self.kv.reorder(rows)  # type: ignore[attr-defined]  # open(needs=("reorder",)) checked it
        first: dict[int, int] = {}  # output -> the row that takes it; any later row takes a copy
        self.outputs = [
            self.outputs[i] if first.setdefault(i, k) == k else self.outputs[i].copy() for k, i in enumerate(index)
        ]

    # -- outputs -------------------------------------------------------------------------

    def emit(self, row: int, token: int, logprobs: Any = None) -> bool:
        """Row `row`'s next token; True when it ends the row (a stop token or string, or the length)."""
        out = self.outputs[row]
        if out.done:
            raise PluginError(
                f"strategy {self.strategy}: emitted token {token} on row {row}, which had already ended "
                f"({out.finish_reason} after {len(out.tokens)} tokens)"
            )
        self._push(out, token, logprobs, row, record=self.copies == 1)
        return out.done

    def finish(self, prompt: int, tokens: Sequence[int], logprobs: Sequence[Any] | None = None) -> None:
        """Prompt `prompt`'s result, for a policy with several rows per prompt (beam search, best-of-n): its tokens
        end by the rules emitted ones do (docs/strategies.md), and must end by one of them."""
        if not 0 <= prompt < len(self.prompts) or self._finished[prompt] is not None:
            raise PluginError(f"strategy {self.strategy}: finished prompt {prompt!r} twice or out of range")
        out = self._output(prompt, prompt * self.copies)
        for i, token in enumerate(tokens):
            if out.done:
                break
            self._push(out, token, None if logprobs is None or self.request.logprobs is None else logprobs[i], prompt)
        if not out.done:
            raise PluginError(
                f"strategy {self.strategy}: prompt {prompt} ended after {len(out.tokens)} tokens, without a stop "
                f"token, a stop string or max_new_tokens={out.limit}"
            )
        self._finished[prompt] = out

    def _output(self, prompt: int, row: int) -> RowOutput:
        """A new output for row `row` (of prompt `prompt`), under the request's stop rules and the chain's."""
        request = self.request
        stops, keep = request.stop_strings[prompt], request.include_stop_str_in_output
        tracker = None if request.tokenizer is None else TextTracker(request.tokenizer, stops, keep)
        ended = functools.partial(self.chain.ended, prompt) if self.chain.ends_rows else None  # beams share it
        return RowOutput(request.limit(prompt), request.stop_tokens[prompt], tracker, ended, self._textless)

    @functools.cached_property
    def _textless(self) -> frozenset[int]:
        """The tokenizer's tokens without text: its `eos_token_ids` and `special_token_ids`, each optional (vLLM
        decodes with skip_special_tokens=True: such a token that ends a row adds no text, kept or not)."""
        tokenizer = self.request.tokenizer
        return frozenset([*tokenizer_ids(tokenizer, "eos_token_ids"), *tokenizer_ids(tokenizer, "special_token_ids")])

    def _push(self, out: RowOutput, token: int, logprobs: Any, row: int, record: bool = True) -> None:
        """Check `token` and add it to `out` (with `logprobs` if the request asks); keep its event if `record`."""
        V = self.spec.vocab_size
        if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < V:
            raise PluginError(f"strategy {self.strategy}: emitted token {token!r}; allowed: an int in [0, {V})")
        event = out.push(token, logprobs if self.request.logprobs is not None else None, row)
        if self._events is not None and record:
            self._events.append(event)

    def _take_events(self) -> list[TokenEvent]:
        """The events kept since the last call (none when the decoding keeps no events)."""
        if self._events is None:
            return []
        events, self._events = self._events, []
        return events

    # -- running a policy ----------------------------------------------------------------

    def run(self, policy: Policy, params: Params, *, per_round: bool) -> Generator[TokenEvent, None, None]:
        """Call `policy` now (a policy that opens, then returns its rounds, is checked at this call) and
        return the events of its rounds, which run as they are asked for, in inference mode on the decode's
        threads (`decodekit.threads`). per_round: enter those around each round only, so the caller's code
        between events runs in its own (`stream`); False: once around the whole run (`generate`)."""
        n = decode_threads(self.model)
        made = compiling.graphs_made() if self.request.compile else None  # the policy's prefill may compile

        @contextlib.contextmanager
        def settings() -> Iterator[None]:
            with torch.inference_mode(), threads(n):
                yield

        try:
            with settings():
                steps = policy(self, params)
        except AttributeError as exc:
            self._check_opened(exc)
            raise
        if steps is not None and not isinstance(steps, Iterator):
            raise PluginError(
                f"strategy {self.strategy}: returned a {type(steps).__name__}; allowed: a policy over the "
                "engine, policy(decoding, params), that emits its tokens through the decoding and returns "
                "None, its rounds (an iterator) or yields"
            )

        def events() -> Generator[TokenEvent, None, None]:
            each_round = settings if per_round else contextlib.nullcontext
            freed = contextlib.nullcontext() if made is None else compiling.freed_after_compiling(made)
            with freed, contextlib.nullcontext() if per_round else settings():
                try:  # not a context manager each round: a try costs nothing until it catches
                    while steps is not None:
                        with each_round():
                            if next(steps, _END) is _END:
                                break
                        yield from self._take_events()
                except AttributeError as exc:
                    self._check_opened(exc)
                    raise
            self._check_complete()
            yield from self._take_events()

        return events()

    def _check_opened(self, exc: AttributeError) -> None:
        """A policy that used a member `open` sets before calling it gets a PluginError saying so, not the
        AttributeError of a member that does not exist yet."""
        if not self.copies and exc.obj is self and exc.name in _OPENED:
            raise PluginError(
                f"strategy {self.strategy}: used decoding.{exc.name} before decoding.open(), which sets it; "
                "allowed: a policy that calls decoding.open() first"
            ) from exc

    def _check_complete(self) -> None:
        if not self.copies:
            raise PluginError(f"strategy {self.strategy}: returned without opening its decoding (decoding.open())")
        if self.copies == 1 and all(out is None for out in self._finished):  # rows are the results
            for row, out in enumerate(self.outputs):
                if not out.done:
                    raise PluginError(
                        f"strategy {self.strategy}: returned with row {row} unfinished after {len(out.tokens)} "
                        f"tokens (no stop token, stop string or max_new_tokens={out.limit})"
                    )
            self._finished = list(self.outputs)
        if missing := [b for b, out in enumerate(self._finished) if out is None]:
            raise PluginError(f"strategy {self.strategy}: returned without a result for prompt {missing[0]}")
        if self.chain.ends_rows:
            self._warn_unfinished()

    def _warn_unfinished(self) -> None:
        """One warning naming the rows that ended while a stage that ends rows (a grammar) says they are
        unfinished (`Chain.unfinished`): run out of `max_new_tokens`, or stopped by a stop string or token."""
        said: dict[str, list[tuple[int, str | None]]] = {}
        for b, out in enumerate(self._finished):
            assert out is not None
            for what in self.chain.unfinished(b, out.tokens):
                said.setdefault(what, []).append((b, out.finish_reason))
        for what, rows in said.items():
            shown = ", ".join(f"{b} ({reason})" for b, reason in rows[:10])
            shown += f" and {len(rows) - 10} more" if len(rows) > 10 else ""
            message = f"{len(rows)} of {len(self._finished)} rows ended with {what}: rows {shown}"
            _warn_from_caller(UnfinishedRowsWarning(message, what, rows))

    def generation(self) -> Generation:
        """The result, once `run` is over."""
        if self.request.prompt_logprobs is not None and self.prompt_logprobs is None:
            raise PluginError(
                f"strategy {self.strategy}: was asked for prompt_logprobs and never prefilled through "
                "decoding.prefill(), which computes them; allowed: a strategy that does, or refuses prompt_logprobs "
                "with a ParameterError before any model work"
            )
        outs = [out for out in self._finished if out is not None]
        return self.result_type(
            tokens=[out.tokens for out in outs],
            finish_reasons=[out.finish_reason or "length" for out in outs],
            prompt_tokens=self.prompts,
            text=None if self.request.tokenizer is None else [out.text or "" for out in outs],
            logprobs=None if self.request.logprobs is None else [out.logprobs for out in outs],
            stopped_by=[out.stopped_by for out in outs],
            prompt_logprobs=self.prompt_logprobs,
            **self.extras,
        )


def _warn_from_caller(warning: Warning) -> None:
    """`warnings.warn(warning, stacklevel=2)` from the caller of the caller, but remembering its text in `_warned`,
    at most `WARNED_KEPT` texts, not in that module's registry (see `_warned`)."""
    frame = sys._getframe(2)
    if len(_warned) >= WARNED_KEPT:
        _warned.clear()
    where = frame.f_globals
    warnings.warn_explicit(
        warning,
        type(warning),
        frame.f_code.co_filename,
        frame.f_lineno,
        where.get("__name__", "<string>"),
        _warned,
        where,
    )


def sample_steps(
    d: Decoding,
    *,
    logprobs: int | None = None,
    before: Callable[[Tensor], None] | None = None,
    after: Callable[[Picked], None] | None = None,
) -> Iterator[None]:
    """The loop of the "sample" strategy, and of any that picks by the chain, on an opened decoding: prefill,
    then one token per row per step from the chain, until every row has ended. `before(logits)` sees each step's
    logits before the chain runs (`d.ctx` as the chain will see it), `after(picked)` what it picked (with
    `logprobs`)."""
    logits = d.prefill()
    while True:
        if before is not None:
            before(logits)
        picked = d.pick(logits, logprobs=logprobs)
        if after is not None:
            after(picked)
        d.advance(picked)
        yield
        if d.done:
            return
        logits = d.forward()


def uncached_logits(model: Model, buf: Tensor, positions: Tensor, filled: int) -> Tensor:
    """Last-column logits `[B, V]` recomputed from `buf[:, :filled]`, cropped to the model's last
    `max_positions` columns, positions re-based so each row's window starts at 0 (`cache="none"`)."""
    start = max(0, filled - model.spec.max_positions)
    pos = positions[:, start:filled]
    return last_column(model, model(buf[:, start:filled], pos - pos[:, :1].clamp(min=0), None, **last_only(model)))


def last_column(model: Model, logits: Tensor) -> Tensor:
    """`logits[:, -1]`, refused unless `[B, T, spec.vocab_size]`: a head wider than the vocabulary (nanoGPT pads
    GPT-2's) would otherwise fail only when a padded id is picked, and as the strategy's fault."""
    if not isinstance(logits, Tensor):  # an output object or a tuple, as transformers' models return
        raise ParameterError(
            f"model {type(model).__name__} returned a {type(logits).__name__}, not a tensor; allowed: logits "
            f"[rows, tokens, spec.vocab_size] = [rows, tokens, {model.spec.vocab_size}]"
        )
    if logits.dim() != 3 or logits.shape[-1] != model.spec.vocab_size:
        raise ParameterError(
            f"model {type(model).__name__} returned logits of shape {tuple(logits.shape)}; allowed: "
            f"[rows, tokens, spec.vocab_size] = [{len(logits)}, tokens, {model.spec.vocab_size}]"
        )
    return logits[:, -1]


def check_rows(owner: str, option: str, value: int, rows: int, columns: int, model: Model, scored: int = 0) -> None:
    """Refuse, before anything is allocated, `rows` rows (`option=value` asked for them, `rows // value` for each
    unit of it: `rows` is a multiple of `value`) of `columns` history columns that the model's device could never
    hold, its total memory (nothing is refused where that is unknown): a `ParameterError` naming the option and the
    most it may be there.

    Counted, as a floor: `ROW_BYTES` a row, 16 bytes a history column (ids and positions), 8 a vocabulary
    entry (the logits in float32, the model's and the chain's) and, for `prompt_logprobs`, the logits of the
    `scored` prompt columns a prefill's forward returns at once, in the model's dtype; a cache checks its own size
    (`check_memory`).
    """
    device, dtype = model_device_dtype(model)
    per_row = ROW_BYTES + 16 * columns + (8 + dtype.itemsize * scored) * model.spec.vocab_size
    if (memory := device_memory(device)) is not None and rows * per_row > memory:
        logits = f" and the logits of {scored:,} prompt columns (prompt_logprobs)" if scored else ""
        raise ParameterError(
            f"{owner}: {option}={value} is invalid: its {rows:,} rows of {columns:,} tokens{logits} would take at "
            f"least {rows * per_row / 2**30:,.1f} GiB, more than the {memory / 2**30:,.1f} GiB of memory of "
            f"device {torch.device(device)}; allowed: {option} <= {memory // per_row // (rows // value):,} here"
        )


def _allocate(factory: Callable[[CacheSpec], KVCache], asked: CacheSpec) -> KVCache:
    """`factory(asked)`, a `ParameterError` where the device cannot allocate it now or the factory returns no cache."""
    try:
        kv = factory(asked)
    except RuntimeError as exc:  # the device holds it in all (the cache's own check) but not free now
        if not _out_of_memory(exc):
            raise
        raise ParameterError(
            f"cache {str(factory)!r}: {asked.batch_size:,} rows of {asked.capacity:,} slots are invalid: device "
            f"{torch.device(asked.device)} could not allocate them ({str(exc).splitlines()[0]}); allowed: fewer "
            "rows (prompts, samples or beams) or tokens, or a cache that stores less (int8, window)"
        ) from None
    if not callable(getattr(kv, "update", None)):  # a factory's slip (None) would otherwise decode uncached
        raise ParameterError(
            f"cache={factory} returned {kv!r}; allowed: a factory (CacheSpec) -> KVCache, or cache='none'"
        )
    return kv


def _out_of_memory(exc: RuntimeError) -> bool:
    """torch's allocation failure: CUDA's `OutOfMemoryError`, or the CPU allocator's (a plain RuntimeError)."""
    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)

"""The `speculative` strategy: a draft proposes up to `k` tokens per row, the target scores them all in
one forward, and the rejection rule (`decodekit_speculative.rejection`) keeps a prefix and adds one
token of its own: output distributed exactly as `dk.generate`'s with the same chain, and for an
"argmax" chain token for token the same.

It is a policy over the engine (`decodekit.engine`), which supplies the cache (checked for what
rollback needs), the seeds, and every rule about emitted tokens (stops, text, logprobs, events).
Each round, per row: the draft proposes from the chain's distribution on the draft's logits; the
target's block is the row's last token and its drafts; the chain runs at every drafted position on
the history it would see without speculation (the row's tokens plus the drafts before it, `step`
counted the same). Rows keep their own number of tokens per round (`decodekit_speculative.row_cache`);
a cache that cannot crop rows unevenly decodes them one at a time (the output is the same).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
from torch import Tensor

from decodekit.cache import Croppable, KVCache, PreallocatedKVCache, RowCroppable, evicts
from decodekit.context import DecodeContext
from decodekit.engine import PREALLOCATED_COLUMNS, Decoding, sample_steps
from decodekit.errors import ChainSpecError, DecodekitError, NumericsError, ParameterError, UnknownNameError
from decodekit.model import Model, check_call, model_device_dtype
from decodekit.params import Params
from decodekit.plugins import Registry, get_registry, load_model
from decodekit.results import Generation, TokenLogprobs, prompt_logprobs, token_logprobs
from decodekit.spec import CacheSpec, ModelSpec
from decodekit.strategies import run_decode
from decodekit_speculative.acceptance import count_round, next_k, no_counts
from decodekit_speculative.drafts import Drafter, ModelDrafter, NgramDrafter, fed_block, feed
from decodekit_speculative.params import NGRAM, SpeculativeParams
from decodekit_speculative.rejection import draw, probabilities, verify_argmax, verify_softmax
from decodekit_speculative.row_cache import RowCache
from decodekit_speculative.safety import Kind, speculation_kind

__all__ = ["SpeculativeGeneration", "resolve_draft", "speculative", "speculative_policy"]


@dataclass
class SpeculativeGeneration(Generation):
    """A `Generation` plus, per row, how many tokens the draft proposed and how many the target accepted, in how
    many rounds, and by position (up to and including the row's last token: drafts past its stop are not counted).

    `draft_rounds[b]`: the rounds in which row b drafted at least one token (a round with no draft is a plain step).
    `accepted_by_position[b][p]`: of those, the rounds that accepted draft p + 1 (so every draft before it); p from
    0 to k - 1. Divided by `draft_rounds[b]` it is the acceptance by position that vLLM reports."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft_rounds: list[int] = field(default_factory=list)
    accepted_by_position: list[list[int]] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted drafts / proposed drafts over all rows; None when nothing was proposed (no rate, not 0)."""
        total = sum(self.drafted)
        return sum(self.accepted) / total if total else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens a round that drafted emitted on average over all rows: its accepted drafts plus the target's own
        token (vLLM's convention: 1 + accepted / rounds); None when no round drafted."""
        rounds = sum(self.draft_rounds)
        return 1 + sum(self.accepted) / rounds if rounds else None


def named_draft(name: str) -> Model:
    """A draft model by its registered name, loaded once: a batch job checks each line (`dk.validate` runs the
    policy's set-up) and decodes each batch with the same draft. Only names are kept; drafts are never changed."""
    return _loaded_draft(get_registry(), name)


@functools.lru_cache(maxsize=2)
def _loaded_draft(registry: Registry, name: str) -> Model:
    """Keyed by the registry too: another registry may name another model `name`, or none."""
    model: Model = load_model(name)
    return model


def resolve_draft(draft: object, target: Model) -> Model | None:
    """The draft model for `draft` (a registered name or a model object); None for "ngram"."""
    try:
        model = (None if draft == NGRAM else named_draft(draft)) if isinstance(draft, str) else draft
    except UnknownNameError as exc:  # said of the draft: the target's name is fine
        raise UnknownNameError(f"speculative: draft={draft!r}: {exc}; or 'ngram' (drafts from the prompt)") from None
    except (ParameterError, ChainSpecError) as exc:  # a draft's path or parameters: the same words would blame --model
        raise type(exc)(f"speculative: draft={draft!r}: {exc}") from None
    if model is None:
        return None
    shown = repr(draft) if isinstance(draft, str) else f"<{type(draft).__name__}>"  # a module's repr is its layers
    spec = getattr(model, "spec", None)
    if not isinstance(spec, ModelSpec) or not callable(model):
        raise ParameterError(
            f"speculative: draft={shown} is invalid; allowed: a registered model name, a model object with a "
            "decodekit.ModelSpec `spec`, or 'ngram'"
        )
    check_call(model, f"speculative: draft={shown}")  # the draft's forward(input_ids) told so, not a TypeError
    if spec.vocab_size != target.spec.vocab_size:
        raise ParameterError(
            f"speculative: draft={shown} has a vocabulary of {spec.vocab_size} tokens, the target "
            f"{target.spec.vocab_size}; allowed: a draft sharing the target's vocabulary"
        )
    mine, theirs = getattr(model, "tokenizer", None), getattr(target, "tokenizer", None)
    if mine is not None and theirs is not None:
        ids = list(range(min(spec.vocab_size, 4096)))
        if mine.decode(ids) != theirs.decode(ids):
            raise ParameterError(
                f"speculative: draft={shown} has a tokenizer that decodes token ids differently from the "
                "target's; allowed: a draft sharing the target's vocabulary"
            )
    return cast(Model, model)  # checked above: callable, with a spec and the target's vocabulary


def speculative(model: Model, prompts: Any, **options: Any) -> SpeculativeGeneration:
    """`dk.decode(model, prompts, strategy="speculative", **options)`.

    draft: a registered model name, a model object sharing the target's vocabulary, or "ngram"
    (prompt lookup of the last `ngram_size` tokens, the default). k: tokens proposed per row and
    round; schedule="heuristic" moves each row's within 1..k (+2 after a round that accepted every
    draft, -1 otherwise). The other options are `dk.generate`'s.
    """
    out = run_decode(model, prompts, "speculative", options, "speculative")
    assert isinstance(out, SpeculativeGeneration)
    return out


def speculative_policy(d: Decoding, params: Params) -> Iterator[None]:
    """The registered strategy (see the module docstring)."""
    assert isinstance(params, SpeculativeParams)
    draft = resolve_draft(params.draft, d.model)
    d.open(lookahead=_lookahead(d, params.k), needs=("crop",), recompute=False)
    _check_rollback(d, params.k)
    kind = speculation_kind(d.chain, d.ctx)
    return _rounds(d, draft, params, kind)  # checked now, not in a generator: `stream` refuses at its call


def _rounds(d: Decoding, draft: Model | None, params: SpeculativeParams, kind: Kind) -> Iterator[None]:
    """The rounds of an opened speculative decoding."""
    B = len(d.rows)
    d.result_type = SpeculativeGeneration
    d.extras = no_counts(B, params.k)
    if d.request.max_new_tokens == 0:  # no round: `sample`'s loop runs the chain once, so refuses what it refuses
        yield from sample_steps(d)
        return
    if B == 1 or d.kv is None or _verifies_rows(d.kv, sized=_lookahead(d, params.k) > 0):
        yield from _Rounds(d, draft, params, kind, list(range(B)), d.kv).run()
        return
    for b in range(B):  # a cache that cannot verify a batch in one forward: each row alone (the output is the same)
        kv = d.open_cache(d.model, 1, d.total, ("crop",))
        yield from _Rounds(d, draft, params, kind, [b], kv).run()


def _verifies_rows(cache: KVCache, sized: bool) -> bool:
    """Whether a round verifies every row in one forward: the cache crops rows unevenly, and has room for a batch's
    junk columns (`_lookahead` sized one that evicts for the text alone, so it must never refuse: `prefill_only`,
    which keeps every token after the prompt, states a capacity and runs its rows one at a time; so does a bounded
    cache of a registered function, whose class `_lookahead` could not see: `sized` False)."""
    bounded = getattr(cache, "capacity", sys.maxsize) < sys.maxsize
    return isinstance(cache, RowCroppable) and not (evicts(cache) and bounded) and (sized or not bounded)


def _lookahead(d: Decoding, k: int) -> int:
    """Slots a round may feed past a row's text: the junk columns of a batch right-aligned by `crop_rows` (at most
    k + 1). A cache without it runs its rows one at a time, never past their text; one that evicts has no slots to
    size, and junk repeats a row's last position (`fed_block`): neither needs more (a window wider than the context
    takes a text that fills it, as `dk.generate` does)."""
    impl = getattr(d.request.cache, "impl", None)
    sized = impl is None or (callable(getattr(impl, "crop_rows", None)) and not evicts(impl))
    return k + 1 if sized else 0


def _within(d: Decoding, b: int, context: int, length: int) -> str:
    """What decodes prompt `b` of `length` tokens within the `context`, or past it: a cache that evicts, where the
    model's keys can move (absolute positions end at the context whatever the cache)."""
    limit = "max_new_tokens" if d.request.limits is None else f"max_new_tokens[{b}]"
    fewer = (
        f"{limit} <= {context - length} (the context less the prompt's {length} tokens)"
        if length < context
        else f"a prompt of fewer than {context} tokens"
    )
    if not d.model.spec.movable_keys:
        return f"{fewer} (the model's positions are absolute: no cache takes it past its context)"
    return f"{fewer}, or a cache (one that evicts, such as window, goes past the context)"


def _check_rollback(d: Decoding, k: int) -> None:
    """What a round may take back must be what the cache can; without a cache, the context must hold it all."""
    if d.kv is None:  # each row from position 0: its own prompt and limit
        needed, b = max((len(p) + d.request.limit(b), b) for b, p in enumerate(d.prompts))
        context, length = d.model.spec.max_positions, len(d.prompts[b])
        if needed > context:
            raise ParameterError(
                f"speculative: cache='none' cannot go past the model's context of {context} positions (here "
                f"{needed}): one forward verifies every draft, and each would need a crop of its own; allowed: "
                f"{_within(d, b, context, length)}"
            )
        return
    assert isinstance(d.kv, Croppable)  # open(needs=("crop",)) checked it
    if d.kv.rollback < k + 1:
        fits = f"k <= {d.kv.rollback - 1}, or " if d.kv.rollback >= 2 else ""  # k >= 1: none fits below 2
        raise ParameterError(
            f"speculative: k={k} is invalid with cache {d.request.cache}: a round may take back k + 1 = {k + 1} "
            f"tokens, and the cache can take back at most {d.kv.rollback} (its rollback); allowed: "
            f"{fits}a cache that can take back {k + 1} (window and the scored caches: slack >= {k + 1})"
        )


def _draft_takes(draft: Model, cache: KVCache, reach: int) -> bool:
    """Whether the draft's own rules (its `validate_cache`: an HF model on eager attention and an evicting cache) let
    it decode `reach` positions through `cache`; where not, it keeps every token, which never changes the output."""
    try:
        if callable(check := getattr(draft, "validate_cache", None)):
            check(cache, reach)
    except ParameterError:
        return False
    return True


class _Recompute:
    """`RowCache`'s interface without a cache: every row feeds its whole history each round."""

    cache: KVCache | None = None

    def prepare(self, lengths: Sequence[int], active: Sequence[bool]) -> int:
        return max(n for n, a in zip(lengths, active) if a)

    def commit(self, row: int, correct: int) -> None:
        pass


class _Rounds:
    """Speculative rounds over some rows of a decoding (their global indices `rows`), with the target cache `kv`."""

    def __init__(
        self,
        d: Decoding,
        draft: Model | None,
        params: SpeculativeParams,
        kind: Kind,
        rows: list[int],
        kv: KVCache | None,
    ) -> None:
        self.d, self.kind, self.k, self.rows, self.chain = d, kind, params.k, rows, d.chain
        self.heuristic = params.schedule == "heuristic"
        self.ks = [params.k] * len(rows)  # each row's k this round: `k` itself, unless the schedule moves it
        self.kv: RowCache | _Recompute = _Recompute() if kv is None else RowCache(kv, len(rows))
        prompts = [d.rows[b] for b in rows]
        self.lengths = [len(p) for p in prompts]  # history (prompt + emitted) per row
        # Grown as it is used (`_grow`), as the engine's history: a huge max_new_tokens runs until a stop token.
        width = max(self.lengths) + min(d.request.max_new_tokens, PREALLOCATED_COLUMNS) + params.k + 2
        self.buf = torch.zeros(len(rows), width, dtype=torch.long, device=d.device)  # row i: buf[i, :lengths[i]]
        for i, p in enumerate(prompts):
            self.buf[i, : len(p)] = torch.tensor(p)
        generators = d.ctx.generators
        self.ctxs = [
            DecodeContext(
                tokens=self.buf[i : i + 1, : self.lengths[i]],
                generators=None if generators is None else [generators[b]],
                tokenizer=d.ctx.tokenizer,
                prompt_index=[b],  # one row per prompt: the global row is the prompt
            )
            for i, b in enumerate(rows)
        ]
        for ctx in self.ctxs:
            self.chain.init_state(ctx)
        self.generated = [0] * len(rows)
        self.drafter: Drafter = (
            NgramDrafter(prompts, params.ngram_size)
            if draft is None
            else ModelDrafter(draft, self._draft_cache(draft, len(rows)), len(rows), d.runs(draft))
        )
        # Without processors the chain's distribution is the logits themselves: no context to set up.
        self.dense = not self.chain.processors

    def _draft_cache(self, draft: Model, batch: int) -> KVCache:
        """The target's backend for the draft when the draft can use it (it keeps every token, or the draft is
        rotary and goes past its context with it); else a cache that keeps every token. What the draft keeps
        changes how often it is right, never the output. Its keys come in the draft's dtype, maybe not the target's."""
        d = self.d
        dtype = model_device_dtype(draft)[1]
        spec = CacheSpec.for_model(draft.spec, batch_size=batch, capacity=d.total, dtype=dtype, device=d.device)
        factory = d.request.cache

        def usable(cache: object) -> bool:
            return not evicts(cache) or draft.spec.movable_keys

        if factory is not None and usable(getattr(factory, "impl", None)):
            try:
                cache = factory(spec)
            except DecodekitError:  # e.g. window(size="auto") for a draft without a calibration
                cache = None
            if isinstance(cache, Croppable) and usable(cache) and _draft_takes(draft, cache, d.total):
                return cache
        # A row drafts only within the draft's context (`ModelDrafter`): rows right-aligned, the slots of the longest
        # drafting row's history and a round's k drafts, whatever max_new_tokens; without a target cache every prompt
        # fits the context, so the batch's slots (twice it at most) keep rows apart.
        slots = spec.capacity if factory is None else min(spec.capacity, draft.spec.max_positions) + self.k + 1
        return PreallocatedKVCache(replace(spec, capacity=slots))

    # -- the chain at one drafted position ---------------------------------------------------

    def _context(self, i: int, j: int) -> DecodeContext:
        """Row i's context at drafted position j: its history, the j drafts before, the step it would be."""
        ctx = self.ctxs[i]
        ctx.tokens, ctx.step = self.buf[i : i + 1, : self.lengths[i] + j], self.generated[i] + j
        return ctx

    def _processed(self, logits: Tensor, i: int, j: int, who: str) -> Tensor:
        """The chain's distribution `[V]` for row i at drafted position j (a `NumericsError` names the row, unless
        the drafts before j end it: `dk.generate` never computes that position, so neither its token matters)."""
        if self.dense:
            x = logits.float()
            if bool(torch.isfinite(x.amax())):
                return x
            error = self._cannot_pick(
                f"the {who} model's logits cannot be sampled (NaN, +inf, or none finite)", i, j, who
            )
        else:
            try:
                return self.chain.distribution(logits[None], self._context(i, j))[0]
            except NumericsError as exc:
                error = self._cannot_pick(str(exc).split(": ", 2)[-1], i, j, who)
        if self._ended_before(i, j):
            return torch.zeros_like(logits, dtype=torch.float32)  # any token: it is never emitted
        raise error from None

    def _ended_before(self, i: int, j: int) -> bool:
        """Whether row i's first j drafts end it (a stop token or string, a stage, the length), as emitted."""
        out = self.d.outputs[self.rows[i]].copy()
        for token in self.buf[i, self.lengths[i] : self.lengths[i] + j].tolist():
            if out.push(token).finish_reason is not None:
                return True
        return False

    def _pick(self, i: int, j: int, logits: Tensor) -> tuple[int, Tensor | None]:
        """The draft's pick for row i at drafted position j, and its q (None: one-hot)."""
        x = self._processed(logits, i, j, "draft")
        if self.kind == "argmax":
            return int(x.argmax()), None
        q = probabilities(x)
        return draw(q, self.ctxs[i].uniform()), q

    # -- rounds ------------------------------------------------------------------------------

    def run(self) -> Iterator[None]:
        d, rows = self.d, self.rows
        done = [d.outputs[b].done for b in rows]
        scoring = d.request.prompt_logprobs is not None  # the first round feeds every prompt whole: it scores them
        while not all(done) or scoring:
            self._grow()
            active = [not x for x in done]
            budgets = [  # each row's block within the context, by its own length (as alone)
                min(self.ks[i], d.outputs[b].limit - self.generated[i] - 1, d.room(self.lengths[i])) if active[i] else 0
                for i, b in enumerate(rows)
            ]
            qs = self.drafter.propose(self.buf, self.lengths, budgets, self._pick)
            counts = [len(q) for q in qs]
            F = self.kv.prepare(self.lengths, [a or scoring for a in active])  # a row with nothing to emit is scored
            lengths_t = torch.tensor(self.lengths, device=d.device)
            ends = lengths_t + torch.tensor(counts, device=d.device)
            ids, positions = fed_block(self.buf, lengths_t, ends, F, F + max(counts))
            seen = functools.partial(self._score_prompts, fed=F) if scoring else None
            # [B, W + 1, V]: column j predicts history index lengths + j
            logits = feed(d.call_model, ids, positions, self.kv.cache, ids.shape[1] - F + 1, seen=seen)
            scoring = False
            for i, b in enumerate(rows):
                if not done[i]:
                    done[i] = self._verify(i, b, logits[i], counts[i], qs[i])
            yield

    def _score_prompts(self, logits: Tensor, first: int, fed: int) -> None:
        """The prompt logprobs the first round's logits `[B, T, V]` of fed columns `first ..` give: row i's column c
        is its history index `lengths[i] - fed + c` and predicts the next (the prompt's, never its drafts')."""
        d, n = self.d, self.d.request.prompt_logprobs
        assert n is not None
        if d.prompt_logprobs is None:
            d.prompt_logprobs = [[None] for _ in d.prompts]
        for i, b in enumerate(self.rows):
            start = self.lengths[i] - fed + first  # the history index of column `first`
            lo, hi = max(start, 0), min(start + logits.shape[1], self.lengths[i] - 1)
            if lo < hi:
                tokens = self.buf[i, lo + 1 : hi + 1]
                d.prompt_logprobs[b] += prompt_logprobs(logits[i, lo - start : hi - start], tokens, n)

    def _grow(self) -> None:
        """Twice the history's columns when a round (k drafts and a token) might not fit."""
        if max(self.lengths) + self.k + 2 > self.buf.shape[1]:
            self.buf = torch.cat([self.buf, torch.zeros_like(self.buf)], 1)

    def _verify(self, i: int, b: int, logits: Tensor, count: int, qs: list[Tensor | None]) -> bool:
        """Row i (global row b): keep a prefix of its drafts and one token of the target's; True when it ends."""
        d = self.d
        drafts: list[int] = self.buf[i, self.lengths[i] : self.lengths[i] + count].tolist()
        processed: dict[int, Tensor] = {}

        def target(j: int) -> Tensor:  # the chain's distribution at drafted position j, computed once
            if j not in processed:
                processed[j] = self._processed(logits[j], i, j, "target")
            return processed[j]

        if self.kind == "argmax":
            n, token = verify_argmax(drafts, lambda j: int(target(j).argmax()))
        else:
            n, token = verify_softmax(drafts, qs, lambda j: probabilities(target(j)), self.ctxs[i].uniform)
            if token < 0:
                raise self._cannot_pick("the chain's distribution cannot be sampled", i, n, "target")
        self.kv.commit(i, self.lengths[i] + n)
        self.drafter.rollback(i, n)
        self.buf[i, self.lengths[i] + n] = token
        for j, t in enumerate((*drafts[:n], token)):
            self.generated[i] += 1
            self.lengths[i] += 1
            ended = d.emit(b, t, self._logprobs(logits[j], target(j), t))
            if ended:
                break
        # A row that ended at position j counts its drafts up to j: those after would have followed its end.
        count_round(d.extras, b, min(count, j + 1) if ended else count, min(n, j + 1))
        if self.heuristic:
            self.ks[i] = next_k(self.ks[i], count, n, self.k)
        return ended

    def _logprobs(self, raw: Tensor, processed: Tensor, token: int) -> TokenLogprobs | None:
        n = self.d.request.logprobs
        if n is None:
            return None
        return token_logprobs(raw[None].float(), processed[None], torch.tensor([token], device=raw.device), n)[0]

    def _cannot_pick(self, why: str, i: int, j: int, who: str) -> NumericsError:
        """The decode loop's diagnosis for row i at drafted position j, naming the global row and the model."""
        step = self.generated[i] + j
        return NumericsError(f"speculative ({who} model): step {step}, row {self.rows[i]}: cannot pick a token: {why}")

"""`ScoredCache`: each row and kv-head keeps its `budget` best-scored entries per layer (docs/caches.md).

A forward attends over what is held plus its own tokens (causally); the held set is compressed back to the
budget before the next forward writes (lazily, so `crop` right after a forward has nothing to undo). The
sinks (a row's first tokens) and the `recent` latest tokens are always kept; among the rest the policy's
score decides, the newer entry on a tie. A prompt (the first forward) or a block longer than `slack` is
attended in full and then compressed as a whole (kvpress's prefill compression), never written token by
token. Keys stay at their own positions while the query's context holds them; past it (rotary models) they
are moved within it (`selection.capped_shift`), beyond a block's own tokens.

Storage is per kv-head (`Storage.write_at`): `budget + 4·slack` slots per layer, enough for the budget, the
new tokens and the evicted entries `crop` may still bring back: any of the last `slack` slots, and back
to the start of a long block not yet compressed (what speculative decoding's first round needs).

Where layers cache other shapes (`CacheSpec.layer_shapes`: Gemma 4, MiMo-V2-Flash) each layer's state, scores and
mask are in its own kv-heads, and its keys are moved by its own rotary frequencies (`CacheSpec.frequencies`); the
layers of one shape (kv-heads, head_dim) plan and score a short forward together (`Step`), as all layers do where
they agree.

With `prefill_only` (kvpress's semantics) only the prompt, the first forward, is compressed, into storage slots
`[0, budget)`; from the next forward on, `PrefillOnly` (prefill_only.py) appends every later token after it.

Under `torch.compile` (`compile=True`) the cache's steps run eagerly (`torch.compiler.disable`), the model's
math around them compiled: their bookkeeping changes every step (host-side lengths, the crop journal), so
traced it recompiled each step, and torch 2.13's inductor could emit an unbound size for it mid-run.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor

from decodekit.cache import capacity_error, row_ends, row_index
from decodekit.compiling import eager
from decodekit.errors import ParameterError, PluginError
from decodekit.spec import CacheSpec
from decodekit.storage import SlotWritable, check_keys, check_memory, float_bytes, lookup_storage
from decodekit_cache_scored.params import ScoredParams
from decodekit_cache_scored.policies import Policy
from decodekit_cache_scored.prefill_only import PrefillOnly
from decodekit_cache_scored.selection import (
    NEVER,
    capped_shift,
    free_slots,
    keep_top,
    rotate_each,
    slot_order,
)
from decodekit_cache_scored.state import Block, LayerState, Step

__all__ = ["ObservingScoredCache", "ScoredCache", "resolve_budget"]

_STATE = ("slots", "written", "score", "freed_at")  # a layer's state, as `Step` names it after the write


def resolve_budget(name: str, params: ScoredParams, spec: CacheSpec) -> int:
    """Entries kept per row, kv-head and layer: `budget` (at most the context: no row ever holds more), or the
    context less `compression` (0.5 by default)."""
    M = spec.max_positions
    if params.budget is not None:
        return params.budget if M is None else min(params.budget, M)
    compression = 0.5 if params.compression is None else params.compression
    default = "" if params.compression is not None else " (the default)"
    if M is None:
        raise ParameterError(
            f"cache {name}: compression={compression}{default} is invalid for this model: a ratio of its context, "
            "which it does not state (CacheSpec.max_positions is None); allowed: budget=N (tokens)"
        )
    budget = max(1, int(M * (1 - compression)))
    if budget < params.sinks + params.recent:
        raise ParameterError(
            f"cache {name}: compression={compression}{default} keeps {budget} of {M} entries, fewer than "
            f"sinks={params.sinks} + recent={params.recent}; allowed: budget >= sinks + recent"
        )
    return budget


class ScoredCache:
    """The machinery; a subclass names its `policy` (and observes when the policy needs queries)."""

    name = "scored"
    policy: Policy
    # Its steps run outside a compiled graph (`decodekit.compiling.eager`), so a model may make them one eager
    # call per layer (decodekit-hf does: each call from compiled code would break the graph, specialised on the
    # layer). A settled `prefill_only` cache's traced steps too: their host-side counts per layer would specialise
    # it as well.
    runs_eagerly = True

    def __init__(self, spec: CacheSpec, params: ScoredParams | None = None) -> None:
        params = ScoredParams() if params is None else params
        if self.policy.observes and not callable(getattr(type(self), "observe", None)):
            raise PluginError(
                f"cache {self.name}: policy {type(self.policy).__name__} reads attention (observes=True), but "
                f"{type(self).__name__} has no observe(), so no model hands it the queries; allowed: a subclass of "
                "decodekit_cache_scored.cache.ObservingScoredCache"
            )
        self.spec, self.params = spec, params
        self.budget = resolve_budget(self.name, params, spec)
        self.sinks, self.recent, self.slack = params.sinks, params.recent, params.slack
        self.slots = self.budget + 4 * self.slack
        # prefill_only: the prompt's kept entries, then up to `capacity` later tokens, in the same storage.
        stored = max(self.slots, self.budget + spec.capacity) if params.prefill_only else self.slots
        # prefill_only: the capacity sizes the storage too, so the refusal names it
        later = f", prefill_only=True, capacity={spec.capacity}" if params.prefill_only else ""
        what = f"budget={self.budget}, slack={self.slack}{later}"
        check_memory(f"cache {self.name}", what, float_bytes(spec, [stored] * spec.n_layers), spec.device)
        self._storage = lookup_storage(params.store, self.name)
        self.store = self._storage(spec, [stored] * spec.n_layers)
        if not isinstance(self.store, SlotWritable):
            raise ParameterError(
                f"cache {self.name}: store={params.store!r} is invalid: its storage cannot write each row and head to "
                "slots of its own (write_at); allowed: a storage with write_at (gqa, dense, int8)"
            )
        self._lowest_first = self.slots - torch.arange(self.slots, device=spec.device)  # free_slots' ranking
        # Each layer holds its own kv-heads and head_dim (`spec.layer_shapes`: Gemma 4, MiMo-V2-Flash), so its state
        # (`reset`) and its rotary frequencies are its own; the layers of one shape plan a short forward together.
        shapes = [spec.layer_shape(layer)[:2] for layer in range(spec.n_layers)]  # (kv-heads, head_dim)
        kinds = list(dict.fromkeys(shapes))
        self._group_of = [kinds.index(shape) for shape in shapes]
        self._groups = [[i for i, g in enumerate(self._group_of) if g == group] for group in range(len(kinds))]
        self._inv_freq = [spec.frequencies(layer) for layer in range(spec.n_layers)]
        self.reset()

    # -- the protocol ------------------------------------------------------------------------

    @property
    def length(self) -> int:
        after = self._after_prompt
        return self._layers[-1].length if after is None else after.length

    @property
    def capacity(self) -> int:
        """The length past which `update` refuses: with `prefill_only` every token after the prompt is kept, so
        the spec's; evicting, never (`sys.maxsize`)."""
        return self.spec.capacity if self.params.prefill_only else sys.maxsize

    @property
    def nbytes(self) -> int:
        return self.store.nbytes

    @property
    def rollback(self) -> int:
        """`crop` and `crop_rows` can take back the last `slack` slots (and to the start of the last forward; not
        further back than a long block's start or the last `crop_rows`); with `prefill_only`, any token after the
        prompt."""
        return sys.maxsize if self.params.prefill_only else self.slack

    def reach(self, new: int) -> int:
        """Within the context, keys sit at their own distances; past it (rotary) they are moved within it,
        beyond the forward's own (`_room`). A forward feeds at most the context (`update` refuses more).
        With `prefill_only` every key stays at its own distance: no further than the context."""
        M = self.spec.max_positions
        if not self.spec.movable_keys or M is None or self.params.prefill_only:
            return self.length + new
        return min(self.length + new, M)

    def reset(self) -> None:
        spec = self.spec
        kv_heads = [spec.layer_shape(layer)[0] for layer in range(spec.n_layers)]
        self._layers = [LayerState.empty(spec.batch_size, h, self.slots, spec.device) for h in kv_heads]
        # Each row's first real slot, [B, 1, 1] (as the [B, H, S] state broadcasts it), from the first forward (moved
        # by `crop_rows`).
        self._row_start = torch.zeros(spec.batch_size, 1, 1, dtype=torch.long, device=spec.device)
        self._forward: tuple[int, Tensor, Tensor, Tensor, Tensor] | None = None  # see `_queries`
        self._new: tuple[int, torch.Size, Tensor] | None = None  # see `_new_slots`
        self._steps: list[Step | None] = [None] * len(self._groups)  # each group's, see `_planned`
        self._observed: dict[int, Tensor] = {}  # layer -> a short forward's queries, scored by `_score_observed`
        self._prefill_only = (
            PrefillOnly(
                self.store, self.budget, spec.n_heads, spec.n_layers, spec.batch_size, torch.device(spec.device)
            )
            if self.params.prefill_only
            else None
        )

    @property
    def _after_prompt(self) -> PrefillOnly | None:
        """A `prefill_only` cache's appending half once its prompt is compressed (it then holds every token)."""
        mode = self._prefill_only
        return mode if mode is not None and mode.settled else None

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        mode = self._prefill_only
        if mode is None:
            return self._update(layer, k, v)
        try:
            st = self._layers[layer]
        except IndexError:  # a layer past the spec's: refused naming n_layers (`_update` too)
            check_keys(self.spec, layer, k)
            raise
        # Checked before any work, the prompt too: a prompt past the capacity leaves no room for a token.
        held = mode.fed(layer) if mode.settled else st.length
        if held + k.shape[2] > self.spec.capacity:
            raise capacity_error(f"{self.name}(prefill_only=True)", layer, held, k.shape[2], self.spec.capacity)
        if mode.settled:  # appended after the prompt, even where `crop_rows` took every later token back
            return mode.update(layer, k, v)
        if held == 0:  # the prompt, compressed as every scored cache compresses it
            return self._update(layer, k, v)
        self._settle_prompt(mode)  # the forward after it: the prompt compressed for good
        return mode.update(layer, k, v)

    @eager
    def _update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        try:
            st = self._layers[layer]
        except IndexError:  # a layer past the spec's: refused naming n_layers, as every cache refuses it
            check_keys(self.spec, layer, k)
            raise
        if not st.observed:
            raise PluginError(
                f"{self.name}: layer {layer} was fed again before the model handed its queries to observe(); "
                "this cache scores by attention and needs a model that calls observe; allowed: a model whose "
                "attention goes through decodekit.cache.cached_attention(cache, layer, q, k, v, positions) "
                "(decodekit's GPT, HFModel)"
            )
        start, T = st.length, k.shape[2]
        M = self.spec.max_positions
        if M is not None and T > M:
            raise ParameterError(
                f"{self.name}: a forward of {T} tokens is invalid: its queries would attend across more than the "
                f"model's context; allowed: forwards of at most {M} tokens (the engine prefills in such blocks)"
            )
        if layer in self._observed:  # the last forward is over: its queries are scored before any state is read
            self._score_observed()
        self._settle(layer, st)
        long = self.slack < T or start == 0  # a prompt, however short, as a whole: padding must not decide
        step = None if long else self._planned(layer, st, T)
        if step is None:
            self._compress(st, start, self._room(start, T))
        elif step.held is not None:
            st.alive, st.freed_at, st.held = step.alive[layer], step.freed_at[layer], step.held
        keys, values = self._long_block(layer, st, k, v) if long else self._short_block(layer, st, k, v, step)
        st.length, st.observed, st.keys = start + T, not self.policy.observes, keys
        return keys, values

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        if (after := self._after_prompt) is not None:
            return after.attention_mask(layer, positions)
        return self._scored_mask(layer, positions)

    @eager
    def _scored_mask(self, layer: int, positions: Tensor) -> Tensor:
        st = self._layers[layer]
        query, row_start, st.valid = self._queries(st.length - positions.shape[1], positions)
        step = self._steps[self._group_of[layer]]
        if step is not None and st.key_slots is step.key_slots[layer]:  # every layer's mask at once
            if step.masks is None or step.masks[0] is not self._forward:
                stacked = self._mask(step.stacked_keys, query, row_start)
                step.masks = (self._forward, dict(zip(step.layers, stacked.unbind(0))), stacked)
            st.mask = step.masks[1][layer]
        else:
            st.mask = self._mask(st.key_slots, query, row_start)
        return st.mask

    def _mask(self, key_slots: Tensor, query: Tensor, row_start: Tensor) -> Tensor:
        """`[..., B, n_heads, T, S']` from the key slots `[..., B, H_kv, S']` (the layer's kv-heads): `slot_mask`'s
        rule."""
        keys = key_slots.unsqueeze(-2)  # [..., B, H_kv, 1, S']
        mask = ((keys >= row_start) & (keys <= query)) | (keys == query)
        groups = self.spec.n_heads // key_slots.shape[-2]
        return mask.repeat_interleave(groups, dim=-3) if groups > 1 else mask

    def _queries(self, first: int, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The new queries' slots `[1, 1, T, 1]`, each one's row start `[B, 1, T, 1]` and whether it is real
        `[B, 1, T, 1]`. Every layer of a forward asks with the same positions: computed once."""
        memo = self._forward
        if memo is None or memo[0] != first or memo[1] is not positions:
            query = torch.arange(first, first + positions.shape[1], device=positions.device)  # [T]
            row_start = (query - positions)[:, None, :, None]
            if first == 0:  # each row's start, from its padding; later columns may be junk (speculation), not padding
                self._row_start = row_start[:, :, 0]
            memo = self._forward = (first, positions, query[:, None], row_start, (positions >= 0)[:, None, :, None])
        return memo[2], memo[3], memo[4]

    def _new_slots(self, start: int, shape: torch.Size) -> Tensor:
        """Stream slots `start ..` of a short block, `[B, H_kv, T]` (every layer of a forward asks: made once per
        shape)."""
        memo = self._new
        if memo is None or memo[0] != start or memo[1] != shape:
            new = torch.arange(start, start + shape[-1], device=self.spec.device).expand(shape)
            memo = self._new = (start, shape, new)
        return memo[2]

    def crop(self, n: int) -> None:
        low = self.oldest_crop()
        if not isinstance(n, int) or isinstance(n, bool):
            raise ParameterError(f"{self.name}.crop: n={n!r} is invalid; allowed: an int, {low} <= n <= {self.length}")
        if not low <= n <= self.length:
            raise ParameterError(
                f"{self.name}.crop: n={n} is invalid: the cache holds what it needs to take back slots from {low} on "
                f"({self._reach_back}); allowed: {low} <= n <= {self.length}"
            )
        if n == self.length:
            return
        if (after := self._after_prompt) is not None:
            after.crop(n)
            return
        self._score_observed()
        self._steps = [None] * len(self._groups)
        for st in self._layers:
            if st.pending is not None:  # a long block, not compressed yet: cut it
                st.pending.cut(n, self.slots)
                st.length, st.observed = n, True
                continue
            forward = next(f for f in reversed(st.journal) if f.start <= n)
            st.restore(forward, n, self.policy.apply)

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        """Row `b` keeps its slots before `ends[b]`, as `crop(ends[b])` restores them, moved `length - ends[b]` slots
        (its start with them: right-aligned, docs/speculative.md). A row needing a slot the record cannot restore
        is refused, naming it and its range; one that keeps none of its tokens holds nothing. The record starts
        afresh: a later `crop` takes back to `length` at most (what speculation asks: a round's own forward)."""
        ends = row_ends(self.name, ends, length, self.length, self.spec.batch_size)
        if all(e == length for e in ends):  # every row kept the same count: a plain crop
            self.crop(length)
            return
        # Each row's first real slot; a row fed only junk at its last position in a first forward (left out of a
        # speculative round) has a start before slot 0, and nothing to keep.
        starts = [max(start, 0) for start in self._row_start.flatten().tolist()]
        kept = [max(end - start, 0) for end, start in zip(ends, starts)]
        self._check_rows(ends, length, kept, starts)
        if (after := self._after_prompt) is not None:
            after.crop_rows(ends, length, [count == 0 for count in kept])
        else:
            self._score_observed()
            for st in self._layers:
                st.restore_rows(ends, length, [count == 0 for count in kept], self.policy.apply)
        self._forward, self._steps = None, [None] * len(self._groups)
        self._row_start = torch.tensor([length - count for count in kept], device=self.spec.device)[:, None, None]

    def _check_rows(self, ends: list[int], length: int, kept: list[int], starts: list[int]) -> None:
        """Refuse a row that keeps more tokens than `length` slots hold, or needs a slot the record cannot restore."""
        n, after = self.length, self._after_prompt
        lows = after.floors() if after is not None else [self.oldest_crop()] * len(ends)
        # A long block not compressed yet is compressed by each row's last queries: a row keeping none of it has none.
        block = next((st.pending.start for st in self._layers if st.pending is not None), None)
        some = block is not None and any(end > block for end, count in zip(ends, kept) if count > 0)
        for b, (end, count, start, low) in enumerate(zip(ends, kept, starts, lows)):
            if count > length:
                raise ParameterError(
                    f"{self.name}.crop_rows: ends={ends}, length={length} are invalid: row {b} keeps its {count} "
                    f"tokens (slots {start}..{end - 1}), more than {length} slots hold; allowed: length >= {count}"
                )
            if count > 0 and some and end == block:
                raise ParameterError(
                    f"{self.name}.crop_rows: ends[{b}]={end} is invalid: row {b} would keep none of the block from "
                    f"slot {block} on, not compressed yet, which the other rows keep some of (each is compressed by "
                    f"its last queries); allowed: {block} < ends[{b}] <= {n}, or ends[{b}] <= {start} (the row keeps "
                    "none of its tokens)"
                )
            if count > 0 and end < low:
                raise ParameterError(
                    f"{self.name}.crop_rows: ends[{b}]={end} is invalid: the cache holds what it needs to take back "
                    f"row {b}'s slots from {low} on ({self._reach_back}); allowed: {low} <= ends[{b}] <= {n}, or "
                    f"ends[{b}] <= {start} (the row keeps none of its tokens)"
                )

    @property
    def _reach_back(self) -> str:
        """Why `crop` and `crop_rows` go back no further, for their refusals."""
        if self._after_prompt is not None:
            return "prefill_only: the prompt is compressed, every token after it can be taken back"
        return f"rollback={self.slack}, never before a block longer than slack or the last crop_rows"

    def kept(self, layer: int) -> Tensor:
        """`[B, H_kv, budget + 4·slack]`: the stream slot of each entry `layer` holds for each row and kv-head
        (-1: none), in storage order, after the compression the next forward would do (`prefill_only`, after
        the prompt: `[B, H_kv, budget + tokens since]`)."""
        if (after := self._after_prompt) is not None:
            return after.kept(layer)
        self._score_observed()
        st = self._layers[layer]
        if st.pending is not None:
            keep, order, _ = self._select(st.pending)
            return torch.where(keep, st.pending.slots, -1).gather(-1, order)
        alive = self._keep(st.slots, st.alive, st.score, st.length) if st.held > self.budget else st.alive
        return torch.where(alive, st.slots, -1)

    def oldest_crop(self) -> int:
        """The smallest `n` that `crop(n)` accepts."""
        if (after := self._after_prompt) is not None:
            return after.oldest()

        def oldest(st: LayerState) -> int:
            if st.pending is not None:
                return st.pending.start
            return st.journal[0].start if st.journal else st.length

        return max(oldest(st) for st in self._layers)

    def reorder(self, index: Tensor) -> None:
        index = row_index(self.name, index, self.spec.batch_size).to(self._row_start.device)
        if (after := self._after_prompt) is not None:
            after.reorder(index)
            return
        self._score_observed()
        self._forward, self._steps = None, [None] * len(self._groups)  # its row starts are the old rows'
        for layer, st in enumerate(self._layers):
            self._settle(layer, st)
        self.store.reorder(index, self.slots)
        self._row_start = self._row_start.index_select(0, index)
        for st in self._layers:
            st.reorder(index)

    def _settle_prompt(self, mode: PrefillOnly) -> None:
        """The prompt compressed into storage slots `[0, budget)` for good, and `mode` told which hold a token.
        Traced under `compile=True`: a graph break here, inside the model's loop over its layers, would make
        torch skip compiling that loop for good."""
        self._score_observed()
        for layer, st in enumerate(self._layers):
            self._settle(layer, st)
        layers, budget = self._layers, self.budget
        mode.settle(
            layers[-1].length, [st.alive[..., :budget] for st in layers], [st.slots[..., :budget] for st in layers]
        )

    # -- the machinery -------------------------------------------------------------------------

    def _score_observed(self) -> None:
        """Fold the queries `observe` kept into the scores (a cache that observes; here nothing)."""

    def _keep(self, slots: Tensor, alive: Tensor, score: Tensor, length: int, budget: int | None = None) -> Tensor:
        """Which entries stay: `budget` (the cache's by default), padding never, the protected first (a row's
        first `sinks` real tokens, the `recent` latest slots), then by score."""
        row_start = self._row_start
        alive = alive & (slots >= row_start)  # so a sink is any alive entry before row_start + sinks
        if self.sinks:
            score = score.masked_fill(slots < row_start + self.sinks, math.inf)
        if self.recent:
            score = score.masked_fill(slots >= length - self.recent, math.inf)
        return keep_top(score, alive, slots, self.budget if budget is None else budget)

    def _compress(self, st: LayerState, length: int, budget: int) -> None:
        """The held set down to `budget` (the lazy step: before a forward writes)."""
        if st.held <= budget:
            return
        keep = self._keep(st.slots, st.alive, st.score, length, budget)
        st.freed_at = st.freed_at.masked_fill(st.alive ^ keep, length)  # keep is within alive
        st.alive, st.held = keep, budget

    def _planned(self, layer: int, st: LayerState, new: int) -> Step | None:
        """The plan of this short forward (`Step`) for the layers of `layer`'s shape, made at the first of them, or a
        new one if `layer` comes first; None when those layers are not all before it (a layer fed twice, a long block
        pending)."""
        group = self._group_of[layer]
        step, start = self._steps[group], st.length
        if step is not None and step.start == start and step.new == new:
            slots, alive, score, freed_at = step.before[layer]
            if slots is st.slots and alive is st.alive and score is st.score and freed_at is st.freed_at:
                return step
        self._steps[group] = step = self._plan(start, new, self._groups[group], step)
        return step

    def _plan(self, start: int, new: int, group: list[int], last: Step | None) -> Step | None:
        """What a short forward from `start` does to the layers `group` (of one shape) before it writes: the
        compression (`_compress`), the free slots and the written state, as `[L, ...]` tensors (once per forward,
        not per layer). `last`: their last plan, whose stacked state the layers may still hold."""
        layers, room = [self._layers[i] for i in group], self._room(start, new)
        if any(st.length != start or st.pending is not None for st in layers):
            return None
        compress = {st.held > room for st in layers}
        if len(compress) > 1:  # the layers' held counts disagree (never after a prompt): layer by layer
            return None
        before = [(st.slots, st.alive, st.score, st.freed_at) for st in layers]
        slots, alive, score, freed_at = (_stacked(last, name, [x[i] for x in before]) for i, name in enumerate(_STATE))
        held = None
        if compress.pop():
            keep = self._keep(slots, alive, score, start, room)
            freed_at = freed_at.masked_fill(alive ^ keep, start)  # keep is within alive
            alive, held = keep, room
        index = free_slots(alive, freed_at, start - 2 * self.slack, new, self._lowest_first)  # [L, B, H, T]
        stream = torch.arange(start, start + new, device=index.device).expand(index.shape)
        written_slots, written = slots.scatter(-1, index, stream), alive.scatter(-1, index, True)
        key_slots = torch.where(written, written_slots, -1)
        initial = self.policy.at(stream)
        whole = {"slots": written_slots, "written": written, "freed_at": freed_at}
        if initial is not None:
            whole["score"] = score = score.scatter(-1, index, initial)

        def per_layer(x: Tensor) -> dict[int, Tensor]:
            return dict(zip(group, x.unbind(0), strict=True))

        return Step(
            start=start,
            new=new,
            layers=group,
            before=dict(zip(group, before, strict=True)),
            held=held,
            alive=per_layer(alive),
            freed_at=per_layer(freed_at),
            index=per_layer(index),
            slots=per_layer(written_slots),
            written=per_layer(written),
            key_slots=per_layer(key_slots),
            stacked_keys=key_slots,
            initial=None if initial is None else per_layer(initial),
            score=None if initial is None else per_layer(score),
            whole=whole,
        )

    def _room(self, start: int, new: int) -> int:
        """Entries a forward of `new` tokens from stream slot `start` may see besides its own: the budget, and
        past the context (rotary) no more than it leaves, since the held keys are then moved within it, beyond
        the block's (a block of the whole context sees only itself)."""
        M = self.spec.max_positions
        if not self.spec.movable_keys or M is None or start + new <= M:
            return self.budget
        return min(self.budget, M - new)

    def _moved(self, layer: int, keys: Tensor, slots: Tensor, held: Tensor, last: int) -> Tensor:
        """Held keys as the query in slot `last` sees them: moved within the context if it is past it."""
        M, inv_freq = self.spec.max_positions, self._inv_freq[layer]
        if inv_freq is None or M is None or last < M:
            return keys
        real = held & (slots >= self._row_start)  # padding is never seen: it takes no rank
        return rotate_each(keys, capped_shift(slots, real, last, M), inv_freq)

    def _short_block(
        self, layer: int, st: LayerState, k: Tensor, v: Tensor, step: Step | None
    ) -> tuple[Tensor, Tensor]:
        """A few tokens: written into free slots (recorded for crop); the whole storage is returned. `step`:
        where they go and the state after, decided for every layer at once (None: decided here)."""
        start, T = st.length, k.shape[2]
        if step is None:
            index = free_slots(st.alive, st.freed_at, start - 2 * self.slack, T, self._lowest_first)  # [B, H, T]
        else:
            index = step.index[layer]
        self.store.write_at(layer, index, k, v)  # type: ignore[attr-defined]  # checked at construction
        if step is None or step.initial is None:
            initial = self.policy.initial(k, self._new_slots(start, index.shape))
        else:
            initial = step.initial[layer]
        forward = st.snapshot(start, index, initial)
        # Replaced, never written in place: the record of the forward keeps the state before it.
        if step is None:
            st.slots = st.slots.scatter(-1, index, self._new_slots(start, index.shape))
            st.alive = st.alive.scatter(-1, index, True)
            st.key_slots = torch.where(st.alive, st.slots, -1)
        else:
            st.slots, st.alive, st.key_slots = step.slots[layer], step.written[layer], step.key_slots[layer]
        st.score = st.score.scatter(-1, index, initial) if step is None or step.score is None else step.score[layer]
        st.held += T
        st.journal = [f for f in st.journal if f.start >= start + T - 2 * self.slack] + [forward]
        keys, values = self.store.read(layer, 0, self.slots)
        return self._moved(layer, keys, st.slots, forward.alive, start + T - 1), values

    def _long_block(self, layer: int, st: LayerState, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """A long block (a prompt): attended over the held entries and all of itself, compressed after."""
        start, T = st.length, k.shape[2]
        # The block goes through the storage once, like every key, in the layer's shape: slots on `layer` alone.
        scratch = self._storage(self.spec, [0] * layer + [T])
        scratch.write(layer, 0, k, v)
        new_k, new_v = scratch.read(layer, 0, T)
        # Copies: views of the storage the compression rewrites aliased the graph's inputs, on which inductor
        # failed once `compile=True` traced a prefill_only cache's compression at a second budget.
        held_k, held_v = (x.clone() for x in self.store.read(layer, 0, self.slots))
        new = torch.arange(start, start + T, device=k.device).expand(*st.slots.shape[:2], T)
        st.pending = Block(
            start,
            keys=[held_k, new_k],
            values=[held_v, new_v],
            slots=torch.cat([st.slots, new], -1),
            score=torch.cat([st.score, self.policy.initial(k, new)], -1),
            alive=torch.cat([st.alive, torch.ones_like(new, dtype=torch.bool)], -1),
        )
        st.journal = []
        st.key_slots = torch.cat([torch.where(st.alive, st.slots, -1), new], -1)
        moved = self._moved(layer, held_k, st.slots, st.alive, start + T - 1)
        return torch.cat([moved, new_k], 2), torch.cat([held_v, new_v], 2)

    def _selection(self, block: Block, score: Tensor, weights: Tensor | None) -> Tensor:
        """What a long block is compressed by: the held scores (SnapKV overrides it for a prompt)."""
        return score

    def _rows(self, tokens: int) -> int:
        """How many of a long block's last queries its compression reads the attention of (`Policy.rows`)."""
        return self.policy.rows(tokens)

    def _block_weights(self, block: Block) -> Tensor | None:
        """The attention weights `[B, n_heads, r, S']` of the block's last `r` queries (`_rows`), made when it is
        compressed, not when observed: a prompt's other rows are never read (TOVA reads one of 192)."""
        if block.attention is None or block.attention[1].shape[2] == 0:  # a crop may have cut every query
            return None
        keys, queries, mask, valid = block.attention
        T = queries.shape[2]
        if (rows := self._rows(T)) == 0:  # a policy that reads none (`Policy.rows`' default, key-norm's)
            return None
        first = T - rows
        weights = _weights(keys, queries[:, :, first:], mask[:, :, first:], valid[:, :, first:])
        return weights[..., : block.slots.shape[-1]]  # a crop's cut: the columns of the tokens kept

    def _select(self, block: Block) -> tuple[Tensor, Tensor, Tensor]:
        """What a long block and the entries held before it are compressed to: which stay, the first `budget`
        entries in slot order (the kept ones first), and the scores."""
        score, weights = block.score, self._block_weights(block)
        if weights is not None and self.policy.observes:  # SnapKV's key-norm rule reads its window only
            score = self.policy.apply(score, self.policy.contributions(weights, block.slots.shape[1]))
        end = block.start + block.slots.shape[-1] - self.slots
        keep = self._keep(block.slots, block.alive, self._selection(block, score, weights), end)
        order = slot_order(block.slots, keep)
        return keep, order[..., : self.budget], score

    def _settle(self, layer: int, st: LayerState) -> None:
        """Compress a long block left pending by the last forward, and what was held, into the budget, rewritten
        from storage slot 0 in slot order."""
        block = st.pending
        if block is None:
            return
        keep, order, score = self._select(block)
        keys, values = (_gathered(torch.cat(parts, 2), order) for parts in (block.keys, block.values))
        self.store.write(layer, 0, keys, values)
        rest = st.slots.shape[-1] - order.shape[-1]

        def padded(x: Tensor, fill: float | int | bool) -> Tensor:
            return torch.cat([x.gather(-1, order), x.new_full((*x.shape[:-1], rest), fill)], -1)

        st.slots, st.alive, st.score = padded(block.slots, -1), padded(keep, False), padded(score, 0.0)
        st.freed_at = torch.full_like(st.freed_at, NEVER)
        st.held, st.pending = order.shape[-1], None


class ObservingScoredCache(ScoredCache):
    """A scored cache whose policy needs the model's queries (`decodekit.cache.Observing`)."""

    def observe(self, layer: int, queries: Tensor) -> None:
        if self._after_prompt is None:  # after a prefill_only cache's prompt nothing is scored
            self._observe(layer, queries)

    @eager
    def _observe(self, layer: int, queries: Tensor) -> None:
        st = self._layers[layer]
        if st.pending is not None:  # compressed before the next forward (crop may cut it first)
            st.pending.attention = (st.keys, queries, st.mask, st.valid)
        elif self.policy.observes:  # scored with the other layers' at once, before the state is next read
            self._observed[layer] = queries
        st.observed = True

    def _score_observed(self) -> None:
        """The observed short forward's contributions and scores: for the layers of one shape in one batch when the
        forward was planned for all of them (`_score_together`), else per layer."""
        observed = self._observed
        if not observed:
            return
        self._observed = {}
        for step in self._steps:
            if step is not None:
                self._score_together(step, observed)
        for layer, queries in observed.items():
            st = self._layers[layer]
            forward = st.journal[-1]
            weights = _weights(st.keys, queries, st.mask, st.valid)
            forward.contributions = self.policy.contributions(weights, st.slots.shape[1])  # the layer's kv-heads
            st.score = self.policy.apply(st.score, forward.contributions)

    def _score_together(self, step: Step, observed: dict[int, Tensor]) -> None:
        """Score the layers of `step` in one batch, taking their queries out of `observed`, if each was observed
        under the step's mask (the same key slots, masks and queries' validity)."""
        layers = [self._layers[i] for i in step.layers]
        valid = layers[0].valid
        masks = step.masks
        if masks is None or not all(
            i in observed and st.mask is masks[1][i] and st.valid is valid for i, st in zip(step.layers, layers)
        ):
            return
        keys = torch.stack([_float(st.keys) for st in layers])
        queries = torch.stack([observed.pop(i) for i in step.layers])
        contributions = self.policy.contributions(_weights(keys, queries, masks[2], valid), layers[0].slots.shape[1])
        scores = self.policy.apply(_stacked(step, "score", [st.score for st in layers]), contributions)
        step.whole["score"], step.score = scores, dict(zip(step.layers, scores.unbind(0)))  # the next plan's, no stack
        for st, c, score in zip(layers, contributions.unbind(0), step.score.values(), strict=True):
            st.journal[-1].contributions, st.score = c, score


def _stacked(step: Step | None, name: str, layers: list[Tensor]) -> Tensor:
    """The layers' `name` state as one `[L, ...]` tensor: `step`'s, when every layer still holds its view of it (no
    copy), else stacked."""
    whole = None if step is None else step.whole.get(name)
    if step is None or whole is None:
        return torch.stack(layers)
    views = cast(dict[int, Tensor] | None, getattr(step, name))
    same = views is not None and all(a is b for a, b in zip(views.values(), layers, strict=True))
    return whole if same else torch.stack(layers)


def _gathered(x: Tensor, order: Tensor) -> Tensor:
    """`x` `[B, H', S', D]` at entries `order` `[B, H_kv, n]`, as the model's kv-heads `[B, H_kv, n, D]`."""
    repeat = x.shape[1] // order.shape[1]
    index = order.repeat_interleave(repeat, 1) if repeat > 1 else order
    out = x.gather(2, index.unsqueeze(-1).expand(-1, -1, -1, x.shape[-1]))
    return out[:, ::repeat] if repeat > 1 else out


def _weights(keys: Tensor, queries: Tensor, mask: Tensor, valid: Tensor) -> Tensor:
    """Attention weights `[..., B, H, T, S]` of `queries` `[..., B, H, T, D]` over `keys` `[..., B, H_s, S, D]`
    (a query head's group shares its stored head) under `mask`; a padding query (`valid` False) has none."""
    *lead, H, T, D = queries.shape
    keys = _float(keys)
    grouped = _float(queries).reshape(*lead, keys.shape[-3], -1, D)  # [..., B, H_s, H / H_s · T, D]
    scores = (grouped @ keys.transpose(-1, -2)).view(*lead, H, T, -1) * D**-0.5
    return torch.softmax(torch.where(mask, scores, -math.inf), -1) * valid


def _float(x: Tensor) -> Tensor:
    """`x` in float32 (scores are float32 whatever the cache's dtype), with no call when it is already."""
    return x if x.dtype == torch.float32 else x.float()

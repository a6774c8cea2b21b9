"""Conformance checks for caches that choose their entries by score (H2O, TOVA, SnapKV, key-norm, ...).

What such a cache keeps depends on the data, so the suite cannot state it in advance. The kit finds it
out instead: it feeds random values, so every returned value identifies the token it belongs to (by
value, after the storage's round trip), and holds the cache to what a scored cache promises:

- attention over what `update` returns, under `attention_mask`, equals a float64 reference attention
  over exactly the entries each query sees, each key rotated by the kit's own code to the position the
  rule below gives it, and the returned keys are those keys;
- a forward sees every token of its own block (causally) and at most `budget` entries from before it,
  as many as the budget allows, the sinks and the recent tokens among them;
- positions: a held key sits at its own distance from the forward's last query while the oldest held
  one is within the context; past it, the `j`-th oldest at most `context - 1 - j` back;
- deterministic: the same inputs give the same entries, and identical rows keep identical entries;
- `crop(n)` within the rollback equals a cache whose last forward ended at `n`; further back it raises;
- `crop_rows(ends, length)` (a cache that has it): each row, taken back to `ends[b]` and moved to end at
  `length`, attends as after `crop(ends[b])`; a row taken back past the rollback raises;
- `reorder`, `reset`, `nbytes`, `reach`, bounded memory and a stated `capacity`, as for every cache.

The kit is the model: after attending it hands its queries to `observe` when the cache has it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from decodekit.cache import KVCache, RowCroppable, observes
from decodekit.errors import DecodekitError, ParameterError
from decodekit.spec import CacheSpec
from decodekit.testing.caches import (
    CONFIGS,
    FREQUENCIES_SHOWN,
    LAYER_SHAPES,
    ROPE_FREQUENCIES,
    _at,
    _check_capacity,
    _check_learned_positions,
    _expand,
    _frequencies,
    _History,
    _in_place,
    _int,
    _length,
    _mask,
    _positions,
    _rotate,
    _update,
    check_class_capabilities,
    kit_spec,
)

__all__ = ["Draws", "Replay", "ScoredCacheConformance", "Seen"]

SCHEDULE = (3, 1, 2, 1, 1, 3, 1, 1, 1, 2, 1, 1, 1, 1, 3, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1)  # 33 tokens, blocks <= 3
LONG = (20, 1, 1, 2, 1, 1, 3, 1, 1, 1)  # a prompt longer than the slack, then decode


class Draws:
    """The kit's random inputs per layer and forward (`u` unrotated keys, `v`, `q`), logged for a replay.

    same_rows: every row gets row 0's draws (identical rows must keep identical entries)."""

    def __init__(self, seed: int, same_rows: bool = False) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.same_rows = same_rows
        self.log: list[list[tuple[Tensor, Tensor, Tensor]]] = []

    def __call__(self, layer: int, spec: CacheSpec, T: int) -> tuple[Tensor, Tensor, Tensor]:  # noqa: N803
        B = 1 if self.same_rows else spec.batch_size
        kv_heads, D, width = spec.layer_shape(layer)
        u = torch.randn(B, kv_heads, T, D, generator=self.g, dtype=torch.float64)
        v = torch.randn(B, kv_heads, T, width, generator=self.g, dtype=torch.float64)
        q = torch.randn(B, spec.n_heads, T, D, generator=self.g, dtype=torch.float64)
        drawn = tuple(x.expand(spec.batch_size, *x.shape[1:]) for x in (u, v, q))
        if layer == 0:
            self.log.append([])
        self.log[-1].append(drawn)  # type: ignore[arg-type]
        return drawn  # type: ignore[return-value]


class Replay:
    """The draws of a logged run again, forward by forward, each cut to the length asked for."""

    def __init__(self, log: list[list[tuple[Tensor, Tensor, Tensor]]]) -> None:
        self.log, self.forward = log, -1

    def __call__(self, layer: int, spec: CacheSpec, T: int) -> tuple[Tensor, Tensor, Tensor]:  # noqa: N803
        if layer == 0:
            self.forward += 1
        u, v, q = self.log[self.forward][layer]
        return u[:, :, :T], v[:, :, :T], q[:, :, :T]


Source = Callable[[int, CacheSpec, int], tuple[Tensor, Tensor, Tensor]]


@dataclass
class Seen:
    """What one query of one row and kv-head attends to: stream slots, each at the position it is seen at."""

    slots: list[int]
    positions: list[int]


class ScoredCacheConformance:
    """pytest suite for a scored cache: subclass, implement `make`, and state its budget and protections."""

    tolerance = 1e-5  # attention agrees this closely in float32 (float16: 1e-2)
    budget = 5  # entries kept per row, kv-head and layer
    sinks = 1  # the first real tokens of a row, always kept
    recent = 1  # the latest tokens, always kept
    rollback = 3  # how far crop can always take back
    slack = 3  # blocks longer than this are compressed as a whole

    def make(self, spec: CacheSpec) -> KVCache:
        raise NotImplementedError

    def round_trip(self, x: Tensor) -> Tensor:
        """What storing and reading back does to keys and values (a second implementation of it)."""
        return x

    def round_trip_keys(self, x: Tensor) -> Tensor:
        """What storing does to keys, for a storage that treats them apart from values: `round_trip` by default."""
        return self.round_trip(x)

    def round_trip_values(self, x: Tensor) -> Tensor:
        """What storing does to values: `round_trip` by default."""
        return self.round_trip(x)

    def nbytes(self, spec: CacheSpec) -> int:
        """Exact bytes the cache holds, by its own formula."""
        raise NotImplementedError

    # -- the kit as a model ------------------------------------------------------------------

    def _feed(self, cache: KVCache, history: _History, T: int, draws: Source, what: str) -> list[Tensor]:  # noqa: N803
        """Feed `T` tokens to every layer, check each layer's attention, and return the outputs."""
        spec = cache.spec
        first = _length(cache, what)
        positions = _positions(history.pads, first, T)
        outs = []
        for layer in range(spec.n_layers):
            u, v, q = draws(layer, spec, T)
            k = _at(u, positions, _frequencies(spec, layer))
            k, v = k.to(spec.dtype), v.to(spec.dtype)
            history.keys[layer].append(k)
            history.values[layer].append(v)
            at = f"{what}, layer {layer}, slots {first}..{first + T - 1}"
            keys, values = _update(cache, layer, k, v, at)
            mask = _mask(cache, layer, positions, keys.shape[2], at)
            where = f"{at}, returned keys {tuple(keys.shape)}"
            got = self._attend(q, keys.double(), values.double(), mask)
            self._check_layer(spec, history, layer, (keys, values, mask), q, got, first, positions, where)
            if observes(cache):
                cache.observe(layer, q.to(spec.dtype))  # type: ignore[attr-defined]
            outs.append(got)
        return outs

    @staticmethod
    def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        k, v = _expand(k, q.shape[1]), _expand(v, q.shape[1])
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v

    def _check_layer(
        self,
        spec: CacheSpec,
        history: _History,
        layer: int,
        returned: tuple[Tensor, Tensor, Tensor],
        q: Tensor,
        got: Tensor,
        first: int,
        positions: Tensor,
        where: str,
    ) -> None:
        """Every query of the layer, row and kv-head: what it sees (in Python, query by query), then its keys
        and attention (in one batch of tensor ops); the first failure raised is the one a loop over rows,
        queries and kv-heads, in that order, would meet first."""
        keys, values, mask = returned
        k_all, v_all = history.all(layer)
        k_all, v_all = self.round_trip_keys(k_all).double(), self.round_trip_values(v_all).double()
        kv_heads = spec.layer_shape(layer)[0]
        group = spec.n_heads // kv_heads
        T = positions.shape[1]
        heads = mask.expand(-1, spec.n_heads, -1, -1).reshape(spec.batch_size, kv_heads, group, T, -1)
        agree = (heads == heads[:, :, :1]).all(-1).all(2).tolist()  # [B, H_kv, T]
        visible = heads[:, :, 0].tolist()  # [B, H_kv, T, S]
        nearest, fed = self._nearest(values, v_all)
        queries: list[tuple[int, int, int, list[int], list[int], list[int]]] = []  # b, h, i, slots, at, returned
        pending: AssertionError | None = None
        try:
            for b, row in enumerate(positions.tolist()):
                pad = first - row[0]
                for i in range(T):
                    if row[i] < 0:
                        continue
                    for h in range(kv_heads):
                        assert agree[b][h][i], f"{where}: the query heads of kv-head {h} see different keys"
                        seen = self._identify(visible[b][h][i], nearest[b][h], fed[b][h], b, h, where)
                        slots = sorted(seen)
                        self._check_seen(spec, slots, first, first + i, pad, first + T - 1, where)
                        stated = self.seen(spec, slots, first, first + i, first + T - 1, pad)
                        at = [p + pad for p in stated.positions]  # in slots: where each key must sit
                        queries.append((b, h, i, slots, at, [seen[t] for t in slots]))
        except AssertionError as failure:
            pending = failure  # raised after the checks of the queries before it
        if queries:
            self._check_attention(spec, layer, keys, k_all, v_all, q, got, queries, where)
        if pending is not None:
            raise pending

    def _check_attention(
        self,
        spec: CacheSpec,
        layer: int,
        keys: Tensor,
        k_all: Tensor,
        v_all: Tensor,
        q: Tensor,
        got: Tensor,
        queries: list[tuple[int, int, int, list[int], list[int], list[int]]],
        where: str,
    ) -> None:
        """The returned keys are the fed ones moved to their stated positions, and the attention over them is
        a float64 reference's, for every query at once (entries padded to the longest, masked out)."""
        width = max(len(x[3]) for x in queries)

        def padded(lists: list[list[int]]) -> Tensor:
            return torch.tensor([x + [0] * (width - len(x)) for x in lists])

        b, h, i = (torch.tensor(c) for c in zip(*(x[:3] for x in queries)))
        slots, at, index = (
            padded([x[3] for x in queries]),
            padded([x[4] for x in queries]),
            padded([x[5] for x in queries]),
        )
        real = torch.arange(width) < torch.tensor([len(x[3]) for x in queries])[:, None]  # [N, width]
        n, (kv_heads, d) = slots.shape[0], (k_all.shape[1], k_all.shape[-1])  # the layer's
        fed = k_all[b[:, None], h[:, None], slots].reshape(n * width, d)
        moved = _rotate(fed, (at - slots).flatten(), _frequencies(spec, layer))  # by the layer's own frequencies
        moved = moved.reshape(n, width, d)
        stored = (h * keys.shape[1] // kv_heads)[:, None]
        off = (keys[b[:, None], stored, index].double() - moved).abs().amax(-1)  # [N, width]
        key_err = off.masked_fill(~real, 0).amax(-1).tolist()  # masked, not multiplied: a NaN pad stays out
        group = spec.n_heads // kv_heads
        heads = h[:, None] * group + torch.arange(group)  # [N, group]
        scores = q[b[:, None], heads, i[:, None]] @ moved.transpose(-1, -2) / math.sqrt(d)  # [N, group, width]
        w = torch.softmax(scores.masked_fill(~real[:, None], float("-inf")), -1)
        want = w @ v_all[b[:, None], h[:, None], slots]
        att_err = (got[b[:, None], heads, i[:, None]] - want).abs().amax((-1, -2)).tolist()
        tol = self.tolerance if spec.dtype == torch.float32 else max(self.tolerance, 1e-2)
        key_tol = 1e-4 if spec.dtype == torch.float32 else 2e-2
        for (row, kv, query, *_), k_err, a_err in zip(queries, key_err, att_err):
            assert k_err <= key_tol, f"{where}, row {row}, kv-head {kv}: a returned key is off by {k_err:.2e}"
            assert a_err <= tol, f"{where}, row {row}, query {query}: attention differs by {a_err:.2e} > {tol}"

    @staticmethod
    def _nearest(values: Tensor, v_all: Tensor) -> tuple[list[list[list[float]]], list[list[list[int]]]]:
        """Per row, kv-head and returned entry: the distance to the nearest value fed, and that value's slot."""
        H = v_all.shape[1]
        stored = values[:, torch.arange(H) * values.shape[1] // H].double()  # one stored head of each kv-head
        distance = (stored[:, :, :, None] - v_all[:, :, None]).abs().amax(-1)  # [B, H_kv, S, T_fed]
        nearest, fed = distance.min(-1)
        return nearest.tolist(), fed.tolist()

    @staticmethod
    def _identify(
        visible: list[bool], nearest: list[float], fed: list[int], b: int, h: int, where: str
    ) -> dict[int, int]:
        """{stream slot: returned index} of what one query of row `b` sees through kv-head `h`, by value."""
        seen: dict[int, int] = {}
        for j, shown in enumerate(visible):
            if not shown:
                continue
            assert nearest[j] < 1e-2, f"{where}: returned entry {j} (row {b}) is no value the kit fed"
            assert fed[j] not in seen, f"{where}: row {b}, kv-head {h}: slot {fed[j]} is returned twice"
            seen[fed[j]] = j
        return seen

    def _check_seen(
        self, spec: CacheSpec, slots: list[int], first: int, query: int, pad: int, last: int, where: str
    ) -> None:
        """The block causally, at most `budget` held, as many as it allows, sinks and recent kept."""
        block = [t for t in slots if t >= first]
        held = [t for t in slots if t < first]
        at = f"{where}, query {query}"
        assert block == list(range(max(first, pad), query + 1)), f"{at}: sees block slots {block}, not up to {query}"
        assert all(pad <= t for t in held), f"{at}: sees padding"
        assert len(held) <= self.budget, f"{at}: sees {len(held)} held entries > budget {self.budget}"
        fed = max(0, first - pad)
        assert len(held) == min(self.budget, fed), f"{at}: holds {len(held)} of {fed} (budget {self.budget})"
        for t in range(pad, min(pad + self.sinks, first)):
            assert t in held, f"{at}: sink slot {t} was evicted"
        for t in range(max(pad, first - self.recent), first):
            assert t in held, f"{at}: recent slot {t} was evicted"

    def seen(self, spec: CacheSpec, slots: list[int], first: int, query: int, last: int, pad: int) -> Seen:
        """The positions the entries `slots` (in order) are seen at by the query in slot `query` (see the module)."""
        held = [t for t in slots if t < first]
        M = spec.max_positions
        capped = M is not None and spec.movable_keys and bool(held) and last - held[0] > M - 1
        seen_at = []
        for t in slots:
            distance = last - t
            if capped and t < first:
                distance = min(distance, M - 1 - held.index(t))  # type: ignore[operator]
            seen_at.append(last - distance - pad)
        return Seen(slots, seen_at)

    def _run(
        self, cache: KVCache, history: _History, schedule: Sequence[int], draws: Source, what: str
    ) -> list[list[Tensor]]:
        return [self._feed(cache, history, T, draws, f"{what}: step {s}") for s, T in enumerate(schedule)]

    # -- the checks --------------------------------------------------------------------------

    def test_attention_over_the_kept_entries(self) -> None:
        """Every layer, every step, decode-sized blocks: what each query sees, checked as the module says."""
        for n_heads, n_kv, dtype in CONFIGS:
            spec = kit_spec(n_heads, n_kv, dtype)
            cache = self.make(spec)
            self._run(cache, _History(spec), SCHEDULE, Draws(0), f"{n_heads} heads / {n_kv} kv-heads, {dtype}")
            assert cache.length == sum(SCHEDULE)

    def test_a_long_block_is_attended_whole_then_compressed(self) -> None:
        spec = kit_spec()
        self._run(self.make(spec), _History(spec), LONG, Draws(1), "long block")

    def test_deterministic(self) -> None:
        """The same inputs twice give bit-identical outputs; two identical rows keep identical entries."""
        spec = kit_spec()
        a, b = (self._run(self.make(spec), _History(spec), SCHEDULE, Draws(2), "run") for _ in "ab")
        for step, (x, y) in enumerate(zip(a, b)):
            assert all(torch.equal(p, q) for p, q in zip(x, y)), f"step {step}: two identical runs differ"
        same = self._run(self.make(spec), _History(spec, pads=[0, 0]), SCHEDULE, Draws(3, same_rows=True), "rows")
        for step, outs in enumerate(same):
            for layer, out in enumerate(outs):
                assert torch.equal(out[0], out[1]), f"step {step}, layer {layer}: identical rows attend differently"

    def test_crop(self) -> None:
        """crop(n) within the rollback: what follows equals a cache whose last forward ended at n."""
        spec = kit_spec()
        for back in range(1, self.rollback + 1):
            draws, cache, history = Draws(4), self.make(spec), _History(spec)
            self._run(cache, history, SCHEDULE[:15], draws, "before crop")  # it ends in a block of 3
            n = cache.length - back
            _in_place(cache.crop, n)  # type: ignore[attr-defined]
            history.crop(n)
            assert cache.length == n, f"crop({n}): length {cache.length}"
            twin, twin_history = self.make(spec), _History(spec)
            self._run(twin, twin_history, _cut(SCHEDULE[:15], n), Replay(draws.log), f"fed up to {n}")
            after = self._run(cache, history, (1, 2, *[1] * 10), Draws(5), f"after crop({n})")
            want = self._run(twin, twin_history, (1, 2, *[1] * 10), Draws(5), f"fed up to {n}, then")
            for step, (x, y) in enumerate(zip(after, want)):
                err = max((p - q).abs().max().item() for p, q in zip(x, y))
                assert err <= 1e-5, f"crop({n}) then step {step}: differs from a cache fed up to {n} by {err:.2e}"
        self._crop_into_a_long_block(spec)
        cache = self.make(spec)
        self._run(cache, _History(spec), SCHEDULE[:15], Draws(4), "before")
        too_far = cache.length - 4 * self.slack - 1
        try:
            cache.crop(too_far)  # type: ignore[attr-defined]
        except DecodekitError:
            pass
        else:
            raise AssertionError(f"crop({too_far}), far beyond rollback={self.rollback}, did not raise")

    def _crop_into_a_long_block(self, spec: CacheSpec) -> None:
        """A prompt and drafts fed together, then the drafts taken back: as if the prompt came alone."""
        draws, cache, history = Draws(11), self.make(spec), _History(spec)
        self._run(cache, history, LONG[:1], draws, "prompt")
        n = LONG[0] - 3
        cache.crop(n)  # type: ignore[attr-defined]
        history.crop(n)
        twin, twin_history = self.make(spec), _History(spec)
        self._run(twin, twin_history, [n], Replay(draws.log), f"a prompt of {n}")
        after = self._run(cache, history, (1, 2, *[1] * 6), Draws(12), f"after crop({n})")
        want = self._run(twin, twin_history, (1, 2, *[1] * 6), Draws(12), f"a prompt of {n}, then")
        for step, (x, y) in enumerate(zip(after, want)):
            err = max((p - q).abs().max().item() for p, q in zip(x, y))
            assert err <= 1e-5, f"crop({n}) into a long block, then step {step}: differs by {err:.2e}"

    def test_crop_rows(self) -> None:
        """A cache with `crop_rows` (batched speculative decoding): row 0 taken back over several forwards, whose
        compressions evicted what it must bring back, and moved right (or row 1, left-padded, moved left), then fed
        on, attends as a cache fed the same and cropped at that row's end (into a long block too); a row taken back
        past the rollback raises."""
        spec = kit_spec()
        if not isinstance(self.make(spec), RowCroppable):
            return
        n = sum(SCHEDULE[:14])  # it ends in single tokens: each forward evicted one
        back = min(3, self.rollback)
        for ends, length in (([n - back, n - 1], n - 1), ([n - back, n - 1], n - back)):  # row 0 right, row 1 left
            draws, cache, history = Draws(15), self.make(spec), _History(spec)
            self._run(cache, history, SCHEDULE[:14], draws, "before crop_rows")
            what = f"crop_rows({ends}, {length})"
            _in_place(cache.crop_rows, ends, length)  # type: ignore[attr-defined]
            _crop_rows(history, ends, length)
            assert cache.length == length, f"{what}: length {cache.length}; allowed: {length}"
            after = self._run(cache, history, (1, 2, *[1] * 8), Draws(16), f"after {what}")
            for b, end in enumerate(ends):
                twin, twin_history = self.make(spec), _History(spec)
                self._run(twin, twin_history, SCHEDULE[:14], Replay(draws.log), "the same")
                twin.crop(end)  # type: ignore[attr-defined]
                twin_history.crop(end)
                want = self._run(twin, twin_history, (1, 2, *[1] * 8), Draws(16), f"after crop({end})")
                for step, (x, y) in enumerate(zip(after, want)):
                    err = max((p[b] - q[b]).abs().max().item() for p, q in zip(x, y))
                    assert err <= 1e-5, f"{what} then step {step}: row {b} differs from crop({end}) by {err:.2e}"
        self._crop_rows_into_a_long_block(spec)
        cache = self.make(spec)
        self._run(cache, _History(spec), SCHEDULE[:14], Draws(15), "before")
        too_far = [n, n - 4 * self.slack - 1]
        try:
            cache.crop_rows(too_far, n)  # type: ignore[attr-defined]
        except DecodekitError:
            pass
        else:
            raise AssertionError(
                f"crop_rows({too_far}, {n}): row 1, far beyond rollback={self.rollback}, did not raise"
            )

    def _crop_rows_into_a_long_block(self, spec: CacheSpec) -> None:
        """A prompt and drafts fed together, then the rows' drafts taken back unevenly: each row as if its prompt came
        alone (each is compressed by its own last queries)."""
        draws, cache, history = Draws(17), self.make(spec), _History(spec)
        self._run(cache, history, LONG[:1], draws, "prompt")
        n = LONG[0]
        ends, length = [n - 3, n - 1], n - 1
        _in_place(cache.crop_rows, ends, length)  # type: ignore[attr-defined]
        _crop_rows(history, ends, length)
        after = self._run(cache, history, (1, 2, *[1] * 6), Draws(18), f"a prompt, then crop_rows({ends}, {length})")
        for b, end in enumerate(ends):
            twin, twin_history = self.make(spec), _History(spec)
            self._run(twin, twin_history, [end], Replay(draws.log), f"a prompt of {end}")
            want = self._run(twin, twin_history, (1, 2, *[1] * 6), Draws(18), f"a prompt of {end}, then")
            for step, (x, y) in enumerate(zip(after, want)):
                err = max((p[b] - q[b]).abs().max().item() for p, q in zip(x, y))
                assert err <= 1e-5, (
                    f"crop_rows({ends}, {length}) into a long block, then step {step}: row {b} differs from a prompt "
                    f"of {end} by {err:.2e}"
                )

    def test_reorder(self) -> None:
        for index in ([1, 0], [1, 1]):
            spec = kit_spec()
            draws, cache, history = Draws(6), self.make(spec), _History(spec)
            self._run(cache, history, SCHEDULE[:12], draws, "before reorder")
            _in_place(cache.reorder, torch.tensor(index))  # type: ignore[attr-defined]
            history.reorder(torch.tensor(index))
            self._run(cache, history, (1, 2, 1, 1), draws, f"after reorder({index})")
            cache.reorder(torch.tensor(index))  # type: ignore[attr-defined]
            history.reorder(torch.tensor(index))
            n = cache.length - min(2, self.rollback)  # what was fed before a reorder is still within rollback
            cache.crop(n)  # type: ignore[attr-defined]
            history.crop(n)
            self._run(cache, history, (1, 1), draws, f"after reorder({index}) then crop({n})")

    def test_reset(self) -> None:
        spec = kit_spec()
        cache = self.make(spec)
        reset = getattr(cache, "reset", None)
        if not callable(reset):  # optional: a cache that offers it
            return
        self._run(cache, _History(spec), SCHEDULE[:10], Draws(7), "before reset")
        reset()
        assert cache.length == 0, f"length {cache.length} after reset"
        a = self._run(cache, _History(spec), SCHEDULE, Draws(8), "after reset")
        b = self._run(self.make(spec), _History(spec), SCHEDULE, Draws(8), "new")
        assert all(torch.equal(x, y) for s, t in zip(a, b) for x, y in zip(s, t)), (
            "a reset cache differs from a new one"
        )

    def test_nbytes_fixed(self) -> None:
        for n_heads, n_kv, dtype in CONFIGS:
            spec = kit_spec(n_heads, n_kv, dtype)
            cache = self.make(spec)
            want = self.nbytes(spec)
            _int(cache.nbytes, "cache.nbytes is", "an int property, the bytes the cache holds")  # type: ignore[attr-defined]
            assert cache.nbytes == want, f"nbytes {cache.nbytes} != the formula's {want}"  # type: ignore[attr-defined]
            self._run(cache, _History(spec), SCHEDULE, Draws(9), "feeding")
            assert cache.nbytes == want, f"nbytes {cache.nbytes} after {cache.length} tokens, was {want}"  # type: ignore[attr-defined]

    def test_protocol(self) -> None:
        check_class_capabilities(self.make(kit_spec()))

    def test_capacity(self) -> None:
        """A stated `capacity` is where the cache refuses (`prefill_only`); one that never refuses is fed past
        `spec.capacity` by `test_past_the_context`."""
        _check_capacity(self.make, kit_spec())

    def test_layers_of_other_shapes(self) -> None:
        """A spec whose layers cache other shapes (`layer_shapes`: layer 1 fewer, wider kv-heads and values of another
        width): `_another_spec`, each layer in its own shape."""
        spec = dataclasses.replace(kit_spec(), layer_shapes=LAYER_SHAPES)
        self._another_spec(spec, "layer_shapes", 13, f"layer_shapes={LAYER_SHAPES}")

    def test_rotary_frequencies(self) -> None:
        """A spec whose keys rotate by other frequencies than `rope_base`'s (`ROPE_FREQUENCIES`: a partial rotary on
        layer 0, another type of layer 1): `_another_spec`, held keys moved past the context by their layer's."""
        spec = dataclasses.replace(kit_spec(), rope_frequencies=ROPE_FREQUENCIES)
        self._another_spec(spec, "rope_frequencies", 14, FREQUENCIES_SHOWN)

    def test_learned_positions(self) -> None:
        """A spec whose keys cannot move (`rope_base` None: learned positions, as GPT-2's): `_another_spec`, a held key
        seen at its own distance past the context (`seen`), the budget whole; or a refusal naming `rope_base`."""
        _check_learned_positions(self._another_spec, dataclasses.replace(kit_spec(), rope_base=None), 15)

    def _another_spec(self, spec: CacheSpec, name: str, seed: int, what: str) -> None:
        """A prompt, then decode past the context, also after a beam step's `reorder([1, 1])`, a `crop` and (a cache
        that has it) `crop_rows`, every check above on each layer of `spec`; or the cache refuses `spec` at creation,
        naming the field `name`."""
        try:
            cache = self.make(spec)
        except ParameterError as exc:
            assert name in str(exc), f"{what}: refused, not naming {name}: {exc}"
            return
        draws, history = Draws(seed), _History(spec)
        self._run(cache, history, (*LONG, *SCHEDULE[:12]), draws, what)  # 47 tokens through a 32-position context
        _in_place(cache.reorder, torch.tensor([1, 1]))  # type: ignore[attr-defined]
        history.reorder(torch.tensor([1, 1]))
        self._run(cache, history, (1, 2, 1), draws, f"{what}, after reorder([1, 1])")
        n = cache.length - min(2, self.rollback)
        cache.crop(n)  # type: ignore[attr-defined]
        history.crop(n)
        self._run(cache, history, (1, 1), draws, f"{what}, after crop({n})")
        if isinstance(cache, RowCroppable):
            n = cache.length
            ends, length = [n - min(2, self.rollback), n - 1], n - 1
            _in_place(cache.crop_rows, ends, length)
            _crop_rows(history, ends, length)
            self._run(cache, history, (1, 2), draws, f"{what}, after crop_rows({ends}, {length})")

    def test_past_the_context(self) -> None:
        """66 tokens through a 32-position context: every check above holds, and `reach` stays within it."""
        spec = kit_spec()
        draws, cache, history = Draws(10), self.make(spec), _History(spec)
        for step, T in enumerate((*SCHEDULE, *SCHEDULE)):
            reach = _int(cache.reach(T), f"step {step}: cache.reach({T}) returned", "an int")  # type: ignore[attr-defined]
            assert spec.max_positions is not None and reach <= spec.max_positions, f"step {step}: reach {reach}"
            self._feed(cache, history, T, draws, f"step {step}")


def _cut(schedule: Sequence[int], n: int) -> list[int]:
    """The blocks of `schedule` up to slot `n`, the block holding `n` cut there."""
    out, fed = [], 0
    for T in schedule:
        if fed >= n:
            break
        out.append(min(T, n - fed))
        fed += out[-1]
    return out


def _crop_rows(history: _History, ends: list[int], length: int) -> None:
    """`history.crop_rows`, its new padding given values no token has: the kit knows an entry by its value."""
    history.crop_rows(ends, length)
    for values in history.values:
        for b, pad in enumerate(history.pads):
            values[0][b, :, :pad] = 1e9

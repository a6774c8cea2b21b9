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
- `reorder`, `reset`, `nbytes`, `reach` and bounded memory, as for every cache.

The kit is the model: after attending it hands its queries to `observe` when the cache has it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from decodekit.cache import KVCache, observes
from decodekit.errors import DecodekitError
from decodekit.spec import CacheSpec
from decodekit.testing.caches import CONFIGS, _expand, _History, _positions, _rotate, kit_spec

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
        kv = (B, spec.n_kv_heads, T, spec.head_dim)
        u = torch.randn(kv, generator=self.g, dtype=torch.float64)
        v = torch.randn(kv, generator=self.g, dtype=torch.float64)
        q = torch.randn(B, spec.n_heads, T, spec.head_dim, generator=self.g, dtype=torch.float64)
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

    def nbytes(self, spec: CacheSpec) -> int:
        """Exact bytes the cache holds, by its own formula."""
        raise NotImplementedError

    # -- the kit as a model ------------------------------------------------------------------

    def _feed(self, cache: KVCache, history: _History, T: int, draws: Source, what: str) -> list[Tensor]:  # noqa: N803
        """Feed `T` tokens to every layer, check each layer's attention, and return the outputs."""
        spec = cache.spec
        first = cache.length
        positions = _positions(history.pads, first, T)
        outs = []
        for layer in range(spec.n_layers):
            u, v, q = draws(layer, spec, T)
            k = torch.stack([_rotate(u[b], positions[b].clamp(min=0)) for b in range(spec.batch_size)])
            k, v = k.to(spec.dtype), v.to(spec.dtype)
            history.keys[layer].append(k)
            history.values[layer].append(v)
            keys, values = cache.update(layer, k, v)
            mask = cache.attention_mask(layer, positions)
            where = f"{what}, layer {layer}, slots {first}..{first + T - 1}, returned keys {tuple(keys.shape)}"
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
        keys, values, mask = returned
        k_all, v_all = (self.round_trip(x).double() for x in history.all(layer))
        mask = mask.expand(-1, spec.n_heads, -1, -1)
        tol = self.tolerance if spec.dtype == torch.float32 else max(self.tolerance, 1e-2)
        group = spec.n_heads // spec.n_kv_heads
        for b in range(spec.batch_size):
            pad = first - int(positions[b, 0])
            for i in range(positions.shape[1]):
                if positions[b, i] < 0:
                    continue
                for h in range(spec.n_kv_heads):
                    seen = self._identify(values, v_all, mask, b, h, group, i, where)
                    slots = sorted(seen)
                    self._check_seen(spec, slots, first, first + i, pad, first + positions.shape[1] - 1, where)
                    stated = self.seen(spec, slots, first, first + i, first + positions.shape[1] - 1, pad)
                    moved = _rotate(k_all[b, h, slots], torch.tensor(stated.positions) - torch.tensor(slots) + pad)
                    returned_keys = keys[b, h * keys.shape[1] // spec.n_kv_heads][[seen[t] for t in slots]].double()
                    err = (returned_keys - moved).abs().max().item()
                    key_tol = 1e-4 if spec.dtype == torch.float32 else 2e-2
                    assert err <= key_tol, f"{where}, row {b}, kv-head {h}: a returned key is off by {err:.2e}"
                    heads = slice(h * group, (h + 1) * group)
                    w = torch.softmax(q[b, heads, i] @ moved.T / math.sqrt(spec.head_dim), -1)
                    want = w @ v_all[b, h, slots]
                    err = (got[b, heads, i] - want).abs().max().item()
                    assert err <= tol, f"{where}, row {b}, query {first + i}: attention differs by {err:.2e} > {tol}"

    @staticmethod
    def _identify(
        values: Tensor, v_all: Tensor, mask: Tensor, b: int, h: int, group: int, i: int, where: str
    ) -> dict[int, int]:
        """{stream slot: returned index} of what query `i` of row `b` sees through kv-head `h`, by value."""
        heads = mask[b, h * group : (h + 1) * group, i]  # [group, S]
        assert bool((heads == heads[0]).all()), f"{where}: the query heads of kv-head {h} see different keys"
        index = heads[0].nonzero().flatten()
        stored = values[b, h * values.shape[1] // v_all.shape[1]].double()  # one stored head of the kv-head
        distance = (stored[index, None] - v_all[b, h]).abs().amax(-1)  # [seen, T_fed]
        nearest, fed = distance.min(-1)
        seen: dict[int, int] = {}
        for j, t, d in zip(index.tolist(), fed.tolist(), nearest.tolist()):
            assert d < 1e-2, f"{where}: returned entry {j} (row {b}) is no value the kit fed"
            assert t not in seen, f"{where}: row {b}, kv-head {h}: slot {t} is returned twice"
            seen[t] = j
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
        capped = M is not None and spec.rope_base is not None and bool(held) and last - held[0] > M - 1
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
            cache.crop(n)  # type: ignore[attr-defined]
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

    def test_reorder(self) -> None:
        for index in ([1, 0], [1, 1]):
            spec = kit_spec()
            draws, cache, history = Draws(6), self.make(spec), _History(spec)
            self._run(cache, history, SCHEDULE[:12], draws, "before reorder")
            cache.reorder(torch.tensor(index))  # type: ignore[attr-defined]
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
        self._run(cache, _History(spec), SCHEDULE[:10], Draws(7), "before reset")
        cache.reset()
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
            assert cache.nbytes == want, f"nbytes {cache.nbytes} != the formula's {want}"  # type: ignore[attr-defined]
            self._run(cache, _History(spec), SCHEDULE, Draws(9), "feeding")
            assert cache.nbytes == want, f"nbytes {cache.nbytes} after {cache.length} tokens, was {want}"  # type: ignore[attr-defined]

    def test_past_the_context(self) -> None:
        """66 tokens through a 32-position context: every check above holds, and `reach` stays within it."""
        spec = kit_spec()
        draws, cache, history = Draws(10), self.make(spec), _History(spec)
        for step, T in enumerate((*SCHEDULE, *SCHEDULE)):
            reach = cache.reach(T)  # type: ignore[attr-defined]
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

"""Conformance checks for KV-cache backends, one property per test.

A backend states what it keeps; the kit holds it to that. `CacheConformance.kept(...)` is
the statement: for a query in slot `q` (of an update whose first new slot is `first`),
the slots it attends to and the position it sees each at, counted from its row's first token (a
left-padded row is held to what it would see alone). The kit feeds random keys,
rotated at their positions, and random values, and compares the cache's attention
(the keys `update` returns, under `attention_mask`) with a float64 reference attention
over exactly the stated tokens, built from its own record of what it fed: the storage's
round trip applied (`round_trip`, or `round_trip_keys` and `round_trip_values`), moved keys
rotated by the kit's own rotary code.

Failures name the check, the configuration (heads, dtype), the layer, the step and the shapes; a method that
returns what the protocol does not allow (a float mask, a length that is a method) is named, with what is allowed.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from decodekit.cache import (
    Croppable,
    Evicting,
    KVCache,
    Observing,
    Reorderable,
    RowCroppable,
    Sized,
    evicts,
    observes,
)
from decodekit.errors import CacheCapacityError, DecodekitError, ParameterError
from decodekit.spec import CacheSpec
from decodekit.storage import SlotWritable

__all__ = ["CacheConformance", "check_cache", "check_class_capabilities"]

ROPE_BASE = 10000.0
SCHEDULE = (6, 1, 1, 3, 1, 1, 1, 1, 2, 1, 1, 7, 1, 1, 1, 1, 1, 1, 1, 1)  # tokens per update: 33 in all
PAD = 3  # row 1 of the batch is left-padded by this many slots
LENGTH = "the slots fed per row, the slot the next token goes to (an evicting cache keeps counting)"
CONFIGS = ((4, 4, torch.float32), (4, 2, torch.float32), (4, 1, torch.float32), (4, 2, torch.float16))
# Layers of other shapes (`CacheSpec.layer_shapes`), (kv-heads, head_dim, value width): layer 1 has fewer and wider
# kv-heads, and values of another width, as a Gemma 4 full-attention layer after a sliding one.
LAYER_SHAPES = ((2, 8, 8), (1, 16, 12))
# Keys that rotate by other frequencies than `rope_base`'s (`CacheSpec.rope_frequencies`, which rule over it): layer 0
# turns the first 6 of its 8 dims (a partial rotary embedding, as Phi-4-mini's), layer 1 all 8 by another base, scaled
# (a layer of another type, as Gemma 3's global ones: base 1e6, linear x8).
ROPE_FREQUENCIES = (
    tuple(ROPE_BASE ** (-i / 6) for i in range(0, 6, 2)),
    tuple(1e6 ** (-i / 8) / 8 for i in range(0, 8, 2)),
)
# `decodekit.storage.Storage`'s members, then `SlotWritable`'s: what `test_write_at` names a storage without `read`.
STORAGE_MEMBERS = ("nbytes", "heads", "write", "read", "reorder", "write_at")
FREQUENCIES_SHOWN = "rope_frequencies (layer 0 turns 6 of its 8 dims), keys moved by spec.frequencies(layer)"


def kit_spec(
    n_heads: int = 4, n_kv_heads: int = 2, dtype: torch.dtype = torch.float32, value_dim: int | None = None
) -> CacheSpec:
    """The kit's cache shape: 2 layers, 2 rows, head_dim 8, rotary positions, a 32-position context."""
    return CacheSpec(
        n_layers=2,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=8,
        batch_size=2,
        capacity=40,
        dtype=dtype,
        rope_base=ROPE_BASE,
        max_positions=32,
        value_dim=value_dim,
    )


@functools.cache
def _inverse_frequencies(base: float, D: int) -> Tensor:  # noqa: N803
    """`base`'s rotary frequencies over a head of `D` dimensions, float64 (made once: the kit rotates at every step)."""
    return base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)


def _frequencies(spec: CacheSpec, layer: int) -> Tensor:
    """`layer`'s rotary inverse frequencies by the kit's own code: `rope_frequencies[layer]`, else `rope_base`'s."""
    if spec.rope_frequencies is not None:
        return torch.tensor(spec.rope_frequencies[layer], dtype=torch.float64)
    if spec.rope_base is None:  # learned positions: no key moves, a kept key is attended as fed
        return torch.zeros(0, dtype=torch.float64)
    return _inverse_frequencies(spec.rope_base, spec.layer_shape(layer)[1])


def _at(u: Tensor, positions: Tensor, freqs: Tensor) -> Tensor:
    """Keys `u` `[B, H, T, D]` rotated by `freqs` at `positions` `[B, T]` (clamped at 0, as the model does), in one
    call."""
    B, H, T, D = u.shape
    flat = u.transpose(0, 1).reshape(H, B * T, D)  # every row's tokens along one axis
    return _rotate(flat, positions.clamp(min=0).flatten(), freqs).reshape(H, B, T, D).transpose(0, 1)


def _rotate(x: Tensor, delta: Tensor, freqs: Tensor) -> Tensor:
    """The kit's own rotary code (rotate-half), float64: `x` `[..., T, D]` moved `delta` `[T]` positions by the
    frequencies `freqs` `[n]`, pair `(x_i, x_{i+n})` of its first `2n` dims (the rest pass: a partial rotary)."""
    n = freqs.shape[0]
    angle = delta.to(torch.float64)[:, None] * freqs  # [T, n]
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., :n], x[..., n : 2 * n]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * n :]], -1)


def _check_learned_positions(
    another_spec: Callable[[CacheSpec, str, int, str], None], spec: CacheSpec, seed: int
) -> None:
    """`another_spec` on `spec` of learned positions (`rope_base` None): a cache's own AttributeError or TypeError,
    handed a None it never expected, fails as what is allowed."""
    what = "rope_base=None (learned positions: spec.frequencies(layer) is None, keys cannot move)"
    try:
        another_spec(spec, "rope_base", seed, what)
    except (AttributeError, TypeError) as exc:
        raise AssertionError(
            f"{what}: {type(exc).__name__}: {exc}; allowed: a cache that moves no key where spec.frequencies(layer) "
            "is None, or refuses such a spec at creation with a ParameterError naming rope_base"
        ) from exc


@dataclass
class _History:
    """Everything the kit fed one cache, per layer: keys (rotated, as fed) and values `[B, H_kv, T, D]`."""

    spec: CacheSpec
    pads: list[int] = field(default_factory=lambda: [0, PAD])  # left padding of each row, in slots
    keys: list[list[Tensor]] = field(default_factory=list)
    values: list[list[Tensor]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keys = [[] for _ in range(self.spec.n_layers)]
        self.values = [[] for _ in range(self.spec.n_layers)]

    def length(self, layer: int = 0) -> int:
        return sum(k.shape[2] for k in self.keys[layer])

    def all(self, layer: int) -> tuple[Tensor, Tensor]:
        return torch.cat(self.keys[layer], 2), torch.cat(self.values[layer], 2)

    def crop(self, n: int) -> None:
        for layer in range(self.spec.n_layers):
            k, v = self.all(layer)
            self.keys[layer], self.values[layer] = [k[:, :, :n]], [v[:, :, :n]]

    def crop_rows(self, ends: list[int], length: int) -> None:
        """Row b keeps its first `ends[b]` slots, moved right to end at `length`; the slots before them pad it."""
        self.pads = [pad + length - end for pad, end in zip(self.pads, ends)]
        source = (torch.arange(length)[None, :] + torch.tensor(ends)[:, None] - length).clamp(min=0)  # [B, length]

        def take(x: Tensor) -> Tensor:  # keys and values each at their own width (`value_dim`)
            return x.gather(2, source[:, None, :, None].expand(x.shape[0], x.shape[1], -1, x.shape[3]))

        for layer in range(self.spec.n_layers):
            k, v = self.all(layer)
            self.keys[layer], self.values[layer] = [take(k)], [take(v)]

    def reorder(self, index: Tensor) -> None:
        self.pads = [self.pads[i] for i in index.tolist()]
        for layer in range(self.spec.n_layers):
            k, v = self.all(layer)
            self.keys[layer], self.values[layer] = [k[index]], [v[index]]


def _positions(pads: list[int], first: int, new: int) -> Tensor:
    """`[B, T]` positions of slots `first ..` of rows left-padded by `pads` slots (negative there)."""
    slots = torch.arange(first, first + new)
    return slots[None, :] - torch.tensor(pads)[:, None]


def _layer_spec(spec: CacheSpec, layer: int) -> CacheSpec:
    """`spec` as `layer` sees it: its shape in the scalar fields (what a suite's `stored_heads` reads)."""
    if spec.layer_shapes is None:
        return spec
    h, d, w = spec.layer_shape(layer)
    return replace(spec, n_kv_heads=h, head_dim=d, value_dim=w, layer_shapes=None)


def _expand(x: Tensor, heads: int) -> Tensor:
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _fill(cache: KVCache, T: int) -> None:  # noqa: N803
    """`T` random tokens through every layer, as a model feeds them: the mask asked, the queries observed."""
    spec, first = cache.spec, _length(cache, f"{T} tokens fed")
    g, positions = torch.Generator().manual_seed(first), _positions([0] * spec.batch_size, first, T)
    for layer in range(spec.n_layers):
        kv_heads, head_dim, width = spec.layer_shape(layer)
        shapes = ((kv_heads, head_dim), (kv_heads, width), (spec.n_heads, head_dim))
        k, v, q = (torch.randn(spec.batch_size, h, T, d, generator=g).to(spec.dtype) for h, d in shapes)
        at = f"{T} tokens fed from slot {first}, layer {layer}"
        _mask(cache, layer, positions, _update(cache, layer, k, v, at)[0].shape[2], at)
        if observes(cache):
            cache.observe(layer, q)  # type: ignore[attr-defined]


def _shown(x: object) -> str:
    """What a cache's method or property gave, for a failure: a tensor's dtype and shape, else its kind."""
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor {tuple(x.shape)}"
    if x is None:
        return "None"
    if callable(x):  # a method where the protocol has a property
        return "a method"
    name = type(x).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def check_class_capabilities(cache: object) -> None:
    """Every capability member the cache has is its class's: decodekit reads them from the class without creating
    a cache (`evicts(impl)`, a capability error's list of the installed backends that offer one)."""
    for protocol in (Evicting, Croppable, RowCroppable, Reorderable, Sized, Observing):
        for member in (name for name in vars(protocol) if not name.startswith("_")):
            assert not hasattr(cache, member) or hasattr(type(cache), member), (
                f"{type(cache).__name__}.{member} is set on the instance only; allowed: a member of the class "
                f"(a method or property: decodekit reads {protocol.__name__} from the class, creating no cache)"
            )


def _int(value: object, what: str, allowed: str) -> int:
    """`value`, what `what` ("cache.length is") gave, checked to be an int: else a failure naming it."""
    assert isinstance(value, int) and not isinstance(value, bool), f"{what} {_shown(value)}; allowed: {allowed}"
    return value


def _length(cache: KVCache, what: str) -> int:
    return _int(cache.length, f"{what}: cache.length is", f"an int property, {LENGTH}")


def _in_place(method: Callable[..., object], *args: object) -> None:
    """Call `method` (crop, crop_rows, reorder), which changes the cache: a copy it returned would go unused."""
    returned, shown = method(*args), ", ".join(str(a.tolist() if isinstance(a, Tensor) else a) for a in args)
    assert returned is None, (
        f"{getattr(method, '__name__', method)}({shown}) returned {_shown(returned)}; allowed: None (it changes the "
        "cache in place)"
    )


def _update(cache: KVCache, layer: int, k: Tensor, v: Tensor, where: str) -> tuple[Tensor, Tensor]:
    """`cache.update(layer, k, v)`, what it returns checked: keys and values as the protocol says."""
    spec, got = cache.spec, cache.update(layer, k, v)
    B, D, W = k.shape[0], k.shape[3], v.shape[3]
    allowed = f"allowed: (keys, values), [B, H_stored, S, D] = ({B}, H_stored, S, {D}) and [.., {W}], in {spec.dtype}"
    assert isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(x, Tensor) for x in got), (
        f"{where}: update returned {_shown(got)}; {allowed}"
    )
    keys, values = got
    shapes = keys.dim() == values.dim() == 4 and keys.shape[:3] == values.shape[:3]
    assert shapes and keys.shape[0] == B and (keys.shape[3], values.shape[3]) == (D, W), (
        f"{where}: update returned keys {tuple(keys.shape)} and values {tuple(values.shape)}; {allowed}"
    )
    for name, x in (("keys", keys), ("values", values)):
        assert x.dtype == spec.dtype, f"{where}: update returned {name} of dtype {x.dtype}; {allowed}"
    return keys, values


def _mask(cache: KVCache, layer: int, positions: Tensor, S: int, where: str) -> Tensor:  # noqa: N803
    """`cache.attention_mask(layer, positions)` for `S` keys, checked: a bool mask as the protocol says."""
    mask, (B, T), H = cache.attention_mask(layer, positions), positions.shape, cache.spec.n_heads
    ok = isinstance(mask, Tensor) and mask.dtype == torch.bool and tuple(mask.shape) in {(B, 1, T, S), (B, H, T, S)}
    additive = isinstance(mask, Tensor) and mask.is_floating_point()
    assert ok, (
        f"{where}: attention_mask returned {_shown(mask)}; allowed: a bool tensor [B, 1 or H, T, S] = "
        f"({B}, 1 or {H}, {T}, {S}), True where a query may attend"
        + (" (an additive float mask: return mask == 0)" if additive else "")
    )
    return mask


def _check_capacity(make: Callable[[CacheSpec], KVCache], spec: CacheSpec) -> int:
    """The cache's stated `capacity` (not stated: `spec.capacity` for a cache that keeps all, else unbounded) is
    where `update` refuses: a prompt past it is refused before anything changes, every token up to it is taken
    (a prompt, a block, a token), one more is refused, each refusal a `CacheCapacityError` naming it. Unbounded
    (`sys.maxsize`): a prompt and a token at a time, past `spec.capacity`, all taken. Returns the capacity."""
    cache = make(spec)
    stated = getattr(cache, "capacity", sys.maxsize if evicts(cache) else spec.capacity)
    capacity = _int(stated, "cache.capacity is", "an int property, where update refuses (sys.maxsize: never)")

    def taken(T: int) -> None:  # noqa: N803
        try:
            _fill(cache, T)
        except CacheCapacityError as exc:
            raise AssertionError(
                f"stated capacity {capacity}, yet {T} tokens after {cache.length} refused: {exc}"
            ) from exc

    half = min(capacity, spec.capacity) // 2
    if capacity == sys.maxsize:
        for T in (half, *[1] * (spec.capacity - half + 1)):
            taken(T)
        return capacity

    def refused(T: int, what: str) -> None:  # noqa: N803
        held = cache.length
        try:
            _fill(cache, T)
        except CacheCapacityError as exc:
            assert str(capacity) in str(exc), f"{what}: the capacity error must name the capacity: {exc}"
            assert cache.length == held, f"{what}: refused, yet the cache's length went {held} -> {cache.length}"
        else:
            raise AssertionError(f"{what}: {T} tokens after {held} were taken, past the stated capacity {capacity}")

    refused(capacity + 1, "a prompt past the capacity")
    for T in (half, capacity - half - 1, 1):
        taken(T)
    assert cache.length == capacity, f"fed {capacity} tokens, the cache's length is {cache.length}; allowed: {LENGTH}"
    refused(1, "a token past the capacity")
    return capacity


class CacheConformance:
    """pytest suite for a cache backend: subclass, implement `make`, and state what it keeps.

    Defaults describe a cache that keeps every token at its own position and stores the kv-heads (`gqa`; `dense`,
    which repeats them to `n_heads`, overrides `stored_heads`); an evicting or quantising backend overrides `kept`,
    `round_trip`, `rollback` and `nbytes`.
    """

    in_place = True  # update returns views of buffers it writes in place (no copy of the past)
    tolerance = 1e-5  # attention outputs agree this closely in float32 (float16: 1e-2)

    def make(self, spec: CacheSpec) -> KVCache:
        raise NotImplementedError

    def stored_heads(self, spec: CacheSpec) -> int:
        """Heads `update` returns per slot."""
        return spec.n_kv_heads

    def kept(self, spec: CacheSpec, layer: int, query: int, first: int) -> dict[int, int]:
        """{slot: position it is seen at} for the query in slot `query` of an update starting at `first`, slots
        counted from the row's first token (a left-padded row sees what it would alone)."""
        return {t: t for t in range(query + 1)}

    def round_trip(self, x: Tensor) -> Tensor:
        """What storing and reading back does to keys and values (a second implementation of it)."""
        return x

    def round_trip_keys(self, x: Tensor) -> Tensor:
        """What storing does to keys, for a storage that treats them apart from values: `round_trip` by default."""
        return self.round_trip(x)

    def round_trip_values(self, x: Tensor) -> Tensor:
        """What storing does to values: `round_trip` by default."""
        return self.round_trip(x)

    def rollback(self, spec: CacheSpec) -> int | None:
        """The most recent slots `crop` can always take back; None: any."""
        return None

    def nbytes(self, spec: CacheSpec) -> int:
        """Exact bytes the cache holds, by its own formula."""
        item = torch.empty((), dtype=spec.dtype).element_size()
        width = spec.head_dim + spec.value_width  # a key and a value
        return spec.n_layers * spec.batch_size * spec.capacity * self.stored_heads(spec) * width * item

    # -- helpers ---------------------------------------------------------------------------

    def _feed(self, cache: KVCache, history: _History, T: int, g: torch.Generator, what: str) -> None:  # noqa: N803
        """Feed `T` new tokens to every layer and compare each layer's attention with the reference."""
        spec = cache.spec
        first = _length(cache, what)
        positions = _positions(history.pads, first, T)
        for layer in range(spec.n_layers):
            kv_heads, head_dim, width = spec.layer_shape(layer)
            shape = (spec.batch_size, kv_heads, T, head_dim)
            u = torch.randn(shape, generator=g, dtype=torch.float64)
            k = self._at(u, positions, _frequencies(spec, layer))
            v = torch.randn(*shape[:3], width, generator=g, dtype=torch.float64)
            k, v = k.to(spec.dtype), v.to(spec.dtype)
            history.keys[layer].append(k)
            history.values[layer].append(v)
            at = f"{what}, layer {layer}, slots {first}..{first + T - 1}"
            keys, values = _update(cache, layer, k, v, at)
            where = f"{at}, returned keys {tuple(keys.shape)}"
            heads = self.stored_heads(_layer_spec(spec, layer))
            assert keys.shape[1] == heads, f"{where}: {keys.shape[1]} heads returned, not {heads} (`stored_heads`)"
            mask = _mask(cache, layer, positions, keys.shape[2], at)
            q = torch.randn(spec.batch_size, spec.n_heads, T, head_dim, generator=g, dtype=torch.float64)
            got = self._attend(q, keys.double(), values.double(), mask)
            want = self._reference(spec, history, layer, q, first, positions)
            real = positions >= 0  # padding queries see only themselves; compare the real ones
            errs = (got - want).abs().amax((1, 3)).masked_fill(~real, 0).amax(-1).tolist()  # per row; NaN stays
            tol = self.tolerance if spec.dtype == torch.float32 else max(self.tolerance, 1e-2)
            for b, err in enumerate(errs):
                assert err <= tol, (
                    f"{where}, row {b}: attention differs from the reference by {err:.2e} > {tol}; allowed: attention "
                    "over exactly the tokens `kept` states, stored as `round_trip_keys` and `round_trip_values` "
                    "state, within `tolerance`"
                )
        length = _length(cache, what)
        assert length == first + T, (
            f"{what}: after {T} tokens fed from slot {first}, cache.length is {length}, not {first + T}; "
            f"allowed: {LENGTH}"
        )

    @staticmethod
    def _at(u: Tensor, positions: Tensor, freqs: Tensor) -> Tensor:
        """Keys `u` `[B, H, T, D]` rotated by `freqs` at `positions` `[B, T]` (clamped at 0, as the model does)."""
        return _at(u, positions, freqs)

    @staticmethod
    def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        k, v = _expand(k, q.shape[1]), _expand(v, q.shape[1])
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v  # [B, H, T, D]

    def _reference(
        self, spec: CacheSpec, history: _History, layer: int, q: Tensor, first: int, positions: Tensor
    ) -> Tensor:
        k_all, v_all = history.all(layer)
        k_all, v_all = self.round_trip_keys(k_all).double(), self.round_trip_values(v_all).double()
        out = q.new_zeros(*q.shape[:3], v_all.shape[3])  # [B, H, T, value width]
        rows, queries, slots, shifts = [], [], [], []  # what each real query sees, from `kept`, in Python
        for r, row in enumerate(positions.tolist()):
            pad = first - row[0]  # slots before the row's first token
            for t in range(q.shape[2]):
                if row[t] < 0:
                    continue
                # A row sees what it would alone: `kept` counts slots from the row's first token.
                kept = self.kept(spec, layer, first + t - pad, first - pad)
                seen = {s + pad: p + pad for s, p in kept.items()}
                if seen:  # (no key: the query's output stays 0, as an empty softmax gave it)
                    rows.append(r)
                    queries.append(t)
                    slots.append(sorted(seen))
                    shifts.append([seen[s] - s for s in sorted(seen)])
        if not rows:
            return out
        # Every query at once, its slots padded to the longest and masked out of the softmax.
        width = max(len(x) for x in slots)
        real = torch.arange(width) < torch.tensor([len(x) for x in slots])[:, None]  # [N, W]
        slot = torch.tensor([x + [0] * (width - len(x)) for x in slots])
        shift = torch.tensor([x + [0] * (width - len(x)) for x in shifts])
        b, i = torch.tensor(rows), torch.tensor(queries)  # [N] each
        n, heads, d = len(rows), q.shape[1], q.shape[-1]
        k = k_all.transpose(1, 2)[b[:, None], slot]  # [N, W, H_kv, D]
        k = k.permute(2, 0, 1, 3).reshape(-1, n * width, d)
        k = _rotate(k, shift.flatten(), _frequencies(spec, layer))  # moved keys rotated on, by the layer's frequencies
        k = _expand(k.reshape(-1, n, width, d).transpose(0, 1), heads)  # [N, H, W, D]
        v = _expand(v_all.transpose(1, 2)[b[:, None], slot].permute(0, 2, 1, 3), heads)  # [N, H, W, D]
        scores = q[b, :, i][:, :, None] @ k.transpose(-1, -2)  # [N, H, 1, W]
        scores = (scores / math.sqrt(d)).masked_fill(~real[:, None, None], float("-inf"))
        out[b, :, i] = (torch.softmax(scores, -1) @ v)[:, :, 0]
        return out

    def _configs(self) -> Iterator[tuple[str, CacheSpec]]:
        for n_heads, n_kv, dtype in CONFIGS:
            yield f"{n_heads} heads / {n_kv} kv-heads, {dtype}", kit_spec(n_heads, n_kv, dtype)

    def _run(self, cache: KVCache, history: _History, schedule: Sequence[int], g: torch.Generator, what: str) -> None:
        for step, T in enumerate(schedule):
            self._feed(cache, history, T, g, f"{what}: step {step}")

    # -- the checks --------------------------------------------------------------------------

    def test_protocol(self) -> None:
        cache = self.make(kit_spec())
        assert isinstance(cache, KVCache), f"{type(cache).__name__} lacks members of the KVCache protocol"
        assert _length(cache, "a new cache") == 0, f"a new cache has length {cache.length}"
        check_class_capabilities(cache)
        if isinstance(cache, Croppable):
            stated = self.rollback(cache.spec)
            claimed = _int(cache.rollback, "cache.rollback is", "an int property (sys.maxsize: crop takes back any)")
            want = sys.maxsize if stated is None else stated
            assert claimed == want, f"rollback is {claimed}; the suite states {want}"

    def test_attention_matches_reference(self) -> None:
        """Every layer, every step: attention over what `update` returns == attention over the stated tokens."""
        for config, spec in self._configs():
            g = torch.Generator().manual_seed(0)
            cache, history = self.make(spec), _History(spec)
            self._run(cache, history, SCHEDULE, g, config)
            assert cache.length == sum(SCHEDULE), f"{config}: length {cache.length} after {sum(SCHEDULE)} tokens"

    def test_values_of_another_width(self) -> None:
        """A spec whose values are narrower or wider than the keys (`value_dim`: DeepSeek's latent attention caches
        them so): attention over what `update` returns == the reference; or the cache refuses the spec at creation,
        a `ParameterError` naming value_dim."""
        for value_dim in (4, 12):
            spec = kit_spec(4, 1, torch.float32, value_dim=value_dim)
            try:
                cache = self.make(spec)
            except ParameterError as exc:
                assert "value_dim" in str(exc), f"value_dim={value_dim}: refused without naming value_dim: {exc}"
                return
            what = f"4 heads / 1 kv-head, values of value_dim={value_dim}"
            self._run(cache, _History(spec), SCHEDULE, torch.Generator().manual_seed(9), what)

    def test_layers_of_other_shapes(self) -> None:
        """A spec whose layers cache other shapes (`layer_shapes`: Gemma 4's full-attention layers have wider keys
        than its sliding ones, MiMo-V2-Flash's sliding layers more kv-heads): `_another_spec`."""
        spec = replace(kit_spec(4, 2, torch.float32), layer_shapes=LAYER_SHAPES)
        self._another_spec(spec, "layer_shapes", 10, f"layer_shapes={LAYER_SHAPES}")

    def test_rotary_frequencies(self) -> None:
        """A spec whose keys rotate by other frequencies than `rope_base`'s (`ROPE_FREQUENCIES`: a partial rotary on
        layer 0, another type of layer 1): `_another_spec`, the kit moving a kept key by its layer's frequencies."""
        spec = replace(kit_spec(4, 2, torch.float32), rope_frequencies=ROPE_FREQUENCIES)
        self._another_spec(spec, "rope_frequencies", 12, FREQUENCIES_SHOWN)

    def test_learned_positions(self) -> None:
        """A spec whose keys cannot move (`rope_base` None: learned positions, as GPT-2's; `spec.frequencies(layer)`
        is None): the stated tokens attended as they were fed, or a refusal at creation naming `rope_base`."""
        _check_learned_positions(self._another_spec, replace(kit_spec(4, 2, torch.float32), rope_base=None), 13)

    def _another_spec(self, spec: CacheSpec, name: str, seed: int, what: str) -> None:
        """Attention over what `update` returns == the reference on every layer of `spec`, also after a beam step's
        `reorder` and (a cache that has it) `crop_rows`; or the cache refuses `spec` at creation, a `ParameterError`
        naming the field `name`."""
        try:
            cache = self.make(spec)
        except ParameterError as exc:
            assert name in str(exc), f"{what}: refused, not naming {name}: {exc}"
            return
        g, history = torch.Generator().manual_seed(seed), _History(spec)
        self._run(cache, history, SCHEDULE, g, what)
        if isinstance(cache, Reorderable):
            _in_place(cache.reorder, torch.tensor([1, 1]))
            history.reorder(torch.tensor([1, 1]))
            self._run(cache, history, (1, 2), g, f"{what}, after reorder([1, 1])")
        if isinstance(cache, RowCroppable):
            n = cache.length
            _in_place(cache.crop_rows, [n - 3, n - 1], n - 1)
            history.crop_rows([n - 3, n - 1], n - 1)
            self._run(cache, history, (1, 2), g, f"{what}, after crop_rows")

    def test_keeps_all_returns_every_token(self) -> None:
        """A cache that does not evict (no `reach`) returns every token fed, in slot order (cached == recomputation)."""
        spec = kit_spec()
        cache = self.make(spec)
        if evicts(cache):
            return
        g, history = torch.Generator().manual_seed(1), _History(spec)
        first_ptr = None
        for step, T in enumerate(SCHEDULE[:6]):
            self._feed(cache, history, T, g, f"step {step}")
            for layer in range(spec.n_layers):
                none = [x[:, :, :0] for x in history.all(layer)]  # no new token: what the cache holds
                keys, values = _update(cache, layer, none[0], none[1], f"step {step}")
                k_all, v_all = history.all(layer)
                want_k, want_v = self.round_trip_keys(k_all), self.round_trip_values(v_all)
                where = f"step {step}, layer {layer}, keys {tuple(keys.shape)}"
                for got, want, name in ((keys, want_k, "keys"), (values, want_v, "values")):
                    want = _expand(want, got.shape[1]).to(got.dtype)
                    assert got.shape == want.shape, (
                        f"{where}: {name} of shape {tuple(got.shape)}, want {tuple(want.shape)}"
                    )
                    assert torch.equal(got, want), (
                        f"{where}: {name} != every token fed, in slot order, as `round_trip_{name}` states"
                    )
                if self.in_place and layer == 0:
                    ptr = keys.untyped_storage().data_ptr()
                    first_ptr = ptr if first_ptr is None else first_ptr
                    assert ptr == first_ptr, f"{where}: update reallocated the key buffer (must write in place)"

    def test_write_at(self) -> None:
        """For a cache whose storage (`cache.store`) writes each row and kv-head to slots of its own (`write_at`, what
        `window` and the scored caches write through over `store=`): every entry reads back from the slot it was
        given, as `round_trip_keys` and `round_trip_values` state. Nothing else here writes through it. Checked on
        any storage with `write_at`, a full `Storage` or not (`window(store=...)` takes one without `heads`); one
        without `read`, which the kit reads back with, fails, naming the members of `Storage` it lacks."""
        T = 4  # slots written: within any storage the kit's specs make
        for config, spec in self._configs():
            store = getattr(self.make(spec), "store", None)
            if not isinstance(store, SlotWritable):
                return
            read_back = getattr(store, "read", None)  # a Storage's member: a SlotWritable may lack it
            if not callable(read_back):
                lacks = [m for m in STORAGE_MEMBERS if m != "write_at" and getattr(store, m, None) is None]
                raise AssertionError(
                    f"{config}: the cache's storage {type(store).__name__} has write_at but no read(layer, start, "
                    f"stop), so the kit cannot read back what it wrote; it lacks {', '.join(lacks)}; allowed: a "
                    f"decodekit.storage.Storage ({', '.join(STORAGE_MEMBERS[:-1])}) with write_at"
                )
            g = torch.Generator().manual_seed(5)
            for layer in range(spec.n_layers):
                kv_heads, head_dim, width = spec.layer_shape(layer)
                index = torch.rand(spec.batch_size, kv_heads, T, generator=g).argsort(-1)  # a permutation per row, head
                k = torch.randn(spec.batch_size, kv_heads, T, head_dim, generator=g).to(spec.dtype)
                v = torch.randn(spec.batch_size, kv_heads, T, width, generator=g).to(spec.dtype)
                store.write_at(layer, index, k, v)
                got = read_back(layer, 0, T)
                for x, read, trip in ((k, got[0], self.round_trip_keys), (v, got[1], self.round_trip_values)):
                    where = index[..., None].expand_as(x)
                    want = _expand(torch.empty_like(x).scatter_(2, where, trip(x)), read.shape[1]).double()
                    err = (read.double() - want).abs().amax(-1)  # [B, heads, T]
                    tol = self.tolerance if spec.dtype == torch.float32 else max(self.tolerance, 1e-2)
                    b, h, t = (int(i) for i in torch.unravel_index(err.argmax(), err.shape))
                    assert err[b, h, t] <= tol, (
                        f"{config}, layer {layer}: {type(store).__name__}.write_at(layer, index, k, v), then "
                        f"read(layer, 0, {T}): row {b}, head {h}, slot {t} differs from what index put there by "
                        f"{err[b, h, t]:.2e} > {tol}; allowed: each row and kv-head's k[b, h, t] and v[b, h, t] in "
                        "slot index[b, h, t], stored as `round_trip_keys` and `round_trip_values` state"
                    )

    def test_nbytes_exact(self) -> None:
        """`nbytes` equals the backend's formula, and does not change as tokens are fed."""
        for config, spec in self._configs():
            cache = self.make(spec)
            if not isinstance(cache, Sized):
                return
            want = self.nbytes(spec)
            _int(cache.nbytes, f"{config}: cache.nbytes is", "an int property, the bytes the cache holds")
            assert cache.nbytes == want, (
                f"{config}: nbytes {cache.nbytes} != the formula's {want}; allowed: the suite's nbytes(spec) (by "
                "default every slot, stored_heads(spec) heads, keys and values in spec.dtype: a storage of its own "
                "states its formula there)"
            )
            self._run(cache, _History(spec), SCHEDULE, torch.Generator().manual_seed(2), config)
            assert cache.nbytes == want, f"{config}: nbytes {cache.nbytes} after {cache.length} tokens, was {want}"

    def test_crop(self) -> None:
        """crop(n) takes back the last slots: what is fed next is attended as if they never were."""
        spec = kit_spec()
        g, cache, history = torch.Generator().manual_seed(3), self.make(spec), _History(spec)
        if not isinstance(cache, Croppable):
            return
        self._run(cache, history, SCHEDULE[:12], g, "before crop")
        allowed = self.rollback(spec)
        back = 3 if allowed is None else min(3, allowed)
        n = cache.length - back
        _in_place(cache.crop, n)
        history.crop(n)
        assert cache.length == n, f"crop({n}): length {cache.length}"
        self._run(cache, history, (1, 2, 1), g, f"after crop({n})")
        if allowed is not None:
            too_far = cache.length - allowed - 1
            try:
                cache.crop(too_far)
            except DecodekitError:
                pass
            else:
                raise AssertionError(f"crop({too_far}) beyond rollback={allowed} did not raise")

    def test_crop_rows(self) -> None:
        """crop_rows(ends, length) takes back a different number of slots per row (batched speculative decoding):
        what is fed next is attended as if each row had been fed only its kept tokens, right-aligned. A row taken
        back past the rollback raises."""
        spec = kit_spec()
        g, cache, history = torch.Generator().manual_seed(8), self.make(spec), _History(spec)
        if not isinstance(cache, RowCroppable):
            return
        self._run(cache, history, SCHEDULE[:12], g, "before crop_rows")
        n, allowed = cache.length, self.rollback(spec)
        if allowed is not None:
            too_far = [n, n - allowed - 1]
            try:
                cache.crop_rows(too_far, n)
            except DecodekitError:
                pass
            else:
                raise AssertionError(f"crop_rows({too_far}, {n}): row 1 beyond rollback={allowed} did not raise")
        # Row 0 takes back 3 slots (or the rollback), row 1 one: row 0 moves 2 to the right.
        ends, length = [n - (3 if allowed is None else min(3, allowed)), n - 1], n - 1
        _in_place(cache.crop_rows, ends, length)
        history.crop_rows(ends, length)
        assert cache.length == length, f"crop_rows({ends}, {length}): length {cache.length}; allowed: {LENGTH}"
        self._run(cache, history, (1, 2, 1), g, f"after crop_rows({ends}, {length})")

    def test_reorder(self) -> None:
        """reorder(index) permutes rows: row i then holds what row index[i] held."""
        for index in ([1, 0], [1, 1]):  # swap the rows; a beam step where row 1 continues in both
            spec = kit_spec()
            g, cache, history = torch.Generator().manual_seed(4), self.make(spec), _History(spec)
            if not isinstance(cache, Reorderable):
                return
            self._run(cache, history, SCHEDULE[:12], g, "before reorder")
            _in_place(cache.reorder, torch.tensor(index))
            history.reorder(torch.tensor(index))
            self._run(cache, history, (1, 2, 1, 1), g, f"after reorder({index})")

    def test_reset(self) -> None:
        """A cache that offers reset() (no caller needs one: the engine opens a new cache per decode) behaves as a
        new one after it."""
        spec = kit_spec()
        g, cache = torch.Generator().manual_seed(5), self.make(spec)
        reset = getattr(cache, "reset", None)
        if not callable(reset):
            return
        self._run(cache, _History(spec), SCHEDULE[:10], g, "before reset")
        reset()
        assert cache.length == 0, f"length {cache.length} after reset"
        self._run(cache, _History(spec), SCHEDULE, g, "after reset")

    def test_capacity_or_eviction(self) -> None:
        """The stated capacity is where the cache refuses (`_check_capacity`); one that never refuses holds a
        bounded set after streaming past `spec.capacity`."""
        spec = kit_spec()
        if _check_capacity(self.make, spec) < sys.maxsize:
            return
        cache = self.make(spec)
        z = torch.zeros(spec.batch_size, spec.n_kv_heads, 0, spec.head_dim, dtype=spec.dtype)
        g, history = torch.Generator().manual_seed(6), _History(spec)
        self._run(cache, history, (1,) * 60, g, "streaming")
        v = z[..., : spec.value_width]
        widths = {_update(cache, layer, z, v, "after streaming")[0].shape[2] for layer in range(spec.n_layers)}
        stated = max(len(self.kept(spec, layer, cache.length - 1, cache.length - 1)) for layer in range(2))
        assert max(widths) < 60, f"after 60 tokens the cache returns {max(widths)} keys: it evicts nothing"
        assert max(widths) >= stated, f"the cache returns {max(widths)} keys but states it keeps {stated}"

    def test_reach(self) -> None:
        """`reach(new)` bounds the widest query-key distance (plus one) that the next update presents."""
        spec = kit_spec()
        g, cache, history = torch.Generator().manual_seed(7), self.make(spec), _History(spec)
        if not isinstance(cache, Evicting):
            return
        for step, T in enumerate(SCHEDULE):
            first = cache.length
            reach = _int(cache.reach(T), f"step {step}: cache.reach({T}) returned", "an int, the widest distance + 1")
            widest = max(
                query - min(self.kept(spec, layer, query, first).values()) + 1
                for layer in range(spec.n_layers)
                for query in range(first, first + T)
            )
            assert reach >= widest, f"step {step}: reach({T}) = {reach} < the widest distance + 1 = {widest}"
            context = spec.max_positions or reach  # past it, the engine refuses the cache: it evicts for nothing
            assert reach <= max(widest, context), (
                f"step {step}: reach({T}) = {reach} is past the context of {context}, while the kept tokens present "
                f"at most {widest}; allowed: reach(new) = 1 + the widest distance the next update presents (not "
                "length + new: the engine refuses a cache past the context by it)"
            )
            self._feed(cache, history, T, g, f"step {step}")


def check_cache(suite: CacheConformance) -> None:
    """Run every check of `suite` (a `CacheConformance` with `make` implemented), outside pytest."""
    for name in dir(suite):
        if name.startswith("test_"):
            check: Callable[[], None] = getattr(suite, name)
            check()

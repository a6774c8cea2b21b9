"""The cache kit can fail: each check catches the fault it is about, and names layer, step and shape."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence

import pytest
import torch
from decodekit_cache_gqa.cache import GQACache
from decodekit_cache_window.cache import WindowCache
from decodekit_cache_window.params import WindowParams
from torch import Tensor

import decodekit as dk
from decodekit.cache import PreallocatedKVCache
from decodekit.rope import frequencies
from decodekit.storage import FloatStorage
from decodekit.testing import CacheConformance, check_cache


class DropsOldest(GQACache):
    """Claims to keep everything but forgets slot 0 once 8 tokens are in."""

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        keys, values = super().update(layer, k, v)
        if keys.shape[2] > 8:
            keys = torch.cat([keys[:, :, 1:2], keys[:, :, 1:]], 2)
        return keys, values


class LiesAboutBytes(GQACache):
    @property
    def nbytes(self) -> int:
        return super().nbytes + 1


class CropDoesNothing(GQACache):
    def crop(self, n: int) -> None:
        pass


class ReorderDoesNothing(GQACache):
    def reorder(self, index: Tensor) -> None:
        pass


class StatesTooLittle(GQACache):
    """States one slot less than it takes."""

    @property
    def capacity(self) -> int:
        return self.spec.capacity - 1


class StatesUnbounded(GQACache):
    """States it never refuses, yet keeps every token in its `spec.capacity` slots (as `prefill_only` once did)."""

    capacity = sys.maxsize


class CropRowsAsCrop(GQACache):
    """Takes every row back to `length`, as if all rows ended together: batched speculation then attends to
    other tokens than a row kept (its greedy output differed from dense's), and the kit had no check of it."""

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        self.crop(length)


class LiesAboutLength(GQACache):
    """Reports one slot less than it was fed: the kit fed at the wrong slots and blamed the attention."""

    @property
    def length(self) -> int:
        return max(0, super().length - 1)


class KeysInHalf(FloatStorage):
    """Keys stored in float16, values in the cache's dtype (a storage that rounds one of the two)."""

    def __init__(self, spec: dk.CacheSpec, slots: Sequence[int]) -> None:
        super().__init__(spec, slots)
        self.keys = [k.half() for k in self.keys]

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        k, v = super().read(layer, start, stop)
        return k.to(self.spec.dtype), v


class KeysInHalfCache(PreallocatedKVCache):
    storage = KeysInHalf


class KeysInHalfSuite(CacheConformance):
    in_place = False  # read() converts the keys

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return KeysInHalfCache(spec)

    def round_trip_keys(self, x: Tensor) -> Tensor:
        return x.half().to(x.dtype)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        n = spec.n_layers * spec.batch_size * spec.capacity * spec.n_kv_heads * spec.head_dim
        return n * 2 + n * spec.dtype.itemsize


def test_a_storage_that_rounds_keys_only_states_it_and_passes() -> None:
    """`round_trip` is applied to keys and values alike: a float16-keys storage could not be stated (5.8e-4 off)."""
    check_cache(KeysInHalfSuite())


@pytest.mark.parametrize("wrong", ["keys", "values"])
def test_a_round_trip_stated_for_the_wrong_half_fails(wrong: str) -> None:
    class Wrong(KeysInHalfSuite):
        def round_trip_keys(self, x: Tensor) -> Tensor:  # wrong: as if keys were kept exactly
            return x if wrong == "keys" else x.half().to(x.dtype)

        def round_trip_values(self, x: Tensor) -> Tensor:  # wrong: as if values were rounded too
            return x.half().to(x.dtype) if wrong == "values" else x

    with pytest.raises(AssertionError, match="attention differs from the reference"):
        Wrong().test_attention_matches_reference()


class SinksNotMoved(WindowCache):
    """A window that leaves the sinks at their own positions (what mlx-lm's rotating cache does)."""

    def _shift(self, layer: int, start: int, T: int) -> Tensor:  # noqa: N803
        return torch.zeros(self.spec.batch_size, T, dtype=torch.long)


class WindowCropRowsAsCrop(WindowCache):
    """A window that refuses what the real one refuses, then takes every row back to `length`, as if all rows ended
    together."""

    def crop_rows(self, ends: Sequence[int], length: int) -> None:
        self._check_rows(list(ends), length, [max(end - start, 0) for end, start in zip(ends, self._starts)])
        self.crop(length)


class WindowCropRowsPastTheSlack(WindowCache):
    """A window whose crop_rows never refuses: a row taken back past its slack attends without the tokens its ring
    overwrote."""

    def _check_rows(self, ends: list[int], length: int, kept: list[int]) -> None:
        pass


def suite(factory: Callable[..., dk.KVCache], window: bool = False) -> CacheConformance:
    class Suite(CacheConformance):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            return factory(spec, WindowParams(size=4, sinks=2, slack=3)) if window else factory(spec)

        if window:

            def kept(self, spec: dk.CacheSpec, layer: int, query: int, first: int) -> dict[int, int]:
                seen = {t: t + max(0, query - 5) for t in range(min(2, query + 1))}
                seen.update({t: t for t in range(max(0, query - 3), query + 1)})
                return seen

            def rollback(self, spec: dk.CacheSpec) -> int | None:
                return 3

            def nbytes(self, spec: dk.CacheSpec) -> int:
                return WindowCache(spec, WindowParams(size=4, sinks=2, slack=3)).nbytes

    return Suite()


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    [
        (
            DropsOldest,
            "test_attention_matches_reference",
            r"4 kv-heads, torch.float32: step 3, layer 0, slots 8\.\.10, returned keys \(2, 4, 11, 8\), row 0",
        ),
        (DropsOldest, "test_keeps_all_returns_every_token", r"step 3, layer 0, slots 8\.\.10"),
        (LiesAboutBytes, "test_nbytes_exact", r"nbytes .* != the formula's \d+; allowed: the suite's nbytes\(spec\)"),
        (
            CropRowsAsCrop,
            "test_crop_rows",
            r"after crop_rows\(\[23, 25\], 25\): step 0, layer 0, slots 25\.\.25, .* row 0: attention differs",
        ),
        (CropDoesNothing, "test_crop", r"crop\(\d+\): length"),
        (ReorderDoesNothing, "test_reorder", r"after reorder\(\[1, 0\]\).*attention differs"),
        (StatesTooLittle, "test_capacity_or_eviction", r"40 tokens after 0 were taken, past the stated capacity 39"),
        (LiesAboutLength, "test_capacity_or_eviction", r"fed 40 tokens, the cache.s length is 39; allowed: the slots"),
        (StatesUnbounded, "test_capacity_or_eviction", r"stated capacity \d+, yet 1 tokens after 40 refused"),
        (
            LiesAboutLength,
            "test_attention_matches_reference",
            r"float32: step 0: after 6 tokens fed from slot 0, cache\.length is 5, not 6; allowed: the slots fed",
        ),
    ],
)
def test_each_check_catches_its_fault(factory: type, check: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        getattr(suite(factory), check)()


def test_a_difference_says_what_the_suite_may_have_misstated() -> None:
    with pytest.raises(AssertionError) as err:
        suite(DropsOldest).test_attention_matches_reference()
    assert str(err.value).endswith(
        "; allowed: attention over exactly the tokens `kept` states, stored as `round_trip_keys` and "
        "`round_trip_values` state, within `tolerance`"
    )


def test_a_window_whose_sinks_sit_at_untrained_distances_fails_the_reference() -> None:
    with pytest.raises(AssertionError, match="layer 0.*attention differs from the reference"):
        suite(SinksNotMoved, window=True).test_attention_matches_reference()
    suite(WindowCache, window=True).test_attention_matches_reference()  # the real one passes


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (WindowCropRowsAsCrop, r"after crop_rows\(\[23, 25\], 25\): step 0, layer 0, slots 25\.\.25, .* row 0"),
        (WindowCropRowsPastTheSlack, r"crop_rows\(\[26, 22\], 26\): row 1 beyond rollback=3 did not raise"),
    ],
)
def test_a_window_that_crops_rows_wrongly_fails_the_kit(factory: type, message: str) -> None:
    """The kit's crop_rows check runs on caches that evict too (before: only on caches that keep all)."""
    with pytest.raises(AssertionError, match=message):
        suite(factory, window=True).test_crop_rows()
    suite(WindowCache, window=True).test_crop_rows()  # the real one passes


def layer_0s(spec: dk.CacheSpec) -> list[Tensor | None]:
    """Every layer's keys moved by layer 0's frequencies (one turn for layers of one shape)."""
    return [spec.frequencies(0)] * spec.n_layers


def rope_bases(spec: dk.CacheSpec) -> list[Tensor | None]:
    """Every layer's keys moved by `rope_base`'s frequencies over its whole head (a cache that reads `rope_base`)."""
    assert spec.rope_base is not None
    return [frequencies(spec.layer_shape(layer)[1], spec.rope_base) for layer in range(spec.n_layers)]


@pytest.mark.parametrize(("wrong", "layer"), [(layer_0s, 1), (rope_bases, 0)])
def test_a_window_that_moves_its_sinks_by_other_frequencies_fails_the_kit(
    wrong: Callable[[dk.CacheSpec], list[Tensor | None]], layer: int
) -> None:
    """Before, the kit's specs had `rope_base` only: such a window passed every check and moved the sinks of Llama 3.x,
    Phi-4-mini or Gemma 3 wrongly. The rest of the kit still passes it; `test_rotary_frequencies` names the layer."""

    def make(spec: dk.CacheSpec, params: WindowParams) -> WindowCache:
        cache = WindowCache(spec, params)
        cache._inv_freq = wrong(spec)
        return cache

    suite(make, window=True).test_attention_matches_reference()  # the kit's rope_base spec: right by luck
    with pytest.raises(AssertionError, match=rf"rope_frequencies .*: step \d+, layer {layer}, .*attention differs"):
        suite(make, window=True).test_rotary_frequencies()
    suite(WindowCache, window=True).test_rotary_frequencies()  # the real one passes


class ReachAsIfKeepingAll(WindowCache):
    """A window whose reach is a cache that keeps all's, `length + new`: right by every distance, yet the engine
    refuses it past the context (`ContextLengthError`), the one thing a cache that evicts is for."""

    def reach(self, new: int) -> int:
        return self.length + new


def test_a_reach_past_the_context_where_the_kept_tokens_are_within_it_fails_the_kit() -> None:
    with pytest.raises(AssertionError, match=r"step \d+: reach\(\d\) = 3\d is past the context of 32, while the kept"):
        suite(ReachAsIfKeepingAll, window=True).test_reach()
    suite(WindowCache, window=True).test_reach()  # the real one passes


class AssumesRotary(WindowCache):
    """Reads every layer's frequencies as a tensor: a first draft that assumes every model is rotary."""

    def __init__(self, spec: dk.CacheSpec, params: WindowParams) -> None:
        super().__init__(spec, params)
        self._inv_freq = [spec.frequencies(layer).clone() for layer in range(spec.n_layers)]  # type: ignore[union-attr]


def test_a_cache_that_assumes_rotary_keys_fails_the_kit_on_learned_positions() -> None:
    """Such a cache crashed on the first learned-position model it met (GPT-2); the kit's specs were all rotary, so
    it passed every check."""
    message = r"rope_base=None \(learned positions: .*\): AttributeError: .*; allowed: a cache that moves no key where"
    with pytest.raises(AssertionError, match=message):
        suite(AssumesRotary, window=True).test_learned_positions()
    suite(WindowCache, window=True).test_learned_positions()  # the real one passes


class WriteAtSwapsRows(FloatStorage):
    """A storage whose `write_at` puts each row's entries in the other row's slots: a cache that keeps every token
    in order never calls it, `window(store=...)` and the scored caches attend over the wrong row's keys."""

    def write_at(self, layer: int, index: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        super().write_at(layer, index, k.flip(0), v.flip(0))


class WriteAtSwapsRowsCache(PreallocatedKVCache):
    storage = WriteAtSwapsRows


def test_a_storage_whose_write_at_misplaces_entries_fails_the_kit() -> None:
    """Until 2026-12-06 every check passed it: none wrote through `write_at`."""
    with pytest.raises(AssertionError) as err:
        suite(WriteAtSwapsRowsCache).test_write_at()
    assert re.search(
        r"^4 heads / 4 kv-heads, torch\.float32, layer 0: WriteAtSwapsRows\.write_at\(layer, index, k, v\), then "
        r"read\(layer, 0, 4\): row 0, head \d, slot \d differs from what index put there by [\d.e+-]+ > 1e-05; "
        r"allowed: each row and kv-head's k\[b, h, t\] and v\[b, h, t\] in slot index\[b, h, t\], stored as "
        r"`round_trip_keys` and `round_trip_values` state",
        str(err.value),
    )


class Headless:
    """A storage without `heads` (nothing reads it): `window(store=...)` and the scored caches take it, as they take
    any storage with `write_at`, but it is no `decodekit.storage.Storage`. Its `write_at` swaps the rows."""

    def __init__(self, spec: dk.CacheSpec, slots: Sequence[int]) -> None:
        self.inner = WriteAtSwapsRows(spec, slots)

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes

    def write(self, layer: int, start: int, k: Tensor, v: Tensor) -> None:
        self.inner.write(layer, start, k, v)

    def write_at(self, layer: int, index: Tensor, k: Tensor, v: Tensor) -> None:
        self.inner.write_at(layer, index, k, v)

    def read(self, layer: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        return self.inner.read(layer, start, stop)

    def reorder(self, index: Tensor, stop: int) -> None:
        self.inner.reorder(index, stop)


class HeadlessCache(PreallocatedKVCache):
    storage = Headless  # type: ignore[assignment]  # no `heads`: not a Storage


class Unreadable(Headless):
    """A storage with `write_at` and no `read`: nothing the kit could read back what it wrote from."""

    read = None  # type: ignore[assignment]


class UnreadableCache(PreallocatedKVCache):
    storage = Unreadable  # type: ignore[assignment]


def test_the_write_at_check_runs_on_a_storage_that_is_not_a_full_storage() -> None:
    """Until 2026-12-08 the check ran only on a `decodekit.storage.Storage`: a storage lacking `heads`, which
    `window(store=...)` writes through all the same, passed it whatever its `write_at` did."""
    with pytest.raises(AssertionError, match=r"^4 heads / 4 kv-heads, torch\.float32, layer 0: Headless\.write_at"):
        suite(HeadlessCache).test_write_at()
    message = (
        r"^4 heads / 4 kv-heads, torch\.float32: the cache's storage Unreadable has write_at but no read\(layer, "
        r"start, stop\), so the kit cannot read back what it wrote; it lacks heads, read; allowed: a "
        r"decodekit\.storage\.Storage \(nbytes, heads, write, read, reorder\) with write_at"
    )
    with pytest.raises(AssertionError, match=message):
        suite(UnreadableCache).test_write_at()


def test_the_standard_storages_pass_the_write_at_check() -> None:
    for backend in ("gqa", "dense"):  # int8's own suite runs it with its round trip
        suite(lambda spec, b=backend: dk.create_cache(b, spec)).test_write_at()

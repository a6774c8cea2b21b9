"""The kit for scored caches catches each fault it is there for: a test that could not fail proves nothing."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch
from decodekit_cache_scored.cache import ScoredCache
from decodekit_cache_scored.state import Block, LayerState
from test_cache_kit import KeysInHalf, layer_0s, rope_bases
from torch import Tensor

import decodekit as dk
from decodekit.cache import PreallocatedKVCache
from decodekit.rope import frequencies
from decodekit.testing.scored_caches import ScoredCacheConformance


class Suite(ScoredCacheConformance):
    budget, sinks, recent, rollback, slack = 5, 1, 1, 3, 3
    made = "h2o(budget=5, sinks=1, recent=1, slack=3)"

    def make(self, spec: dk.CacheSpec) -> dk.KVCache:
        return dk.create_cache(self.made, spec)

    def nbytes(self, spec: dk.CacheSpec) -> int:
        return 2 * spec.batch_size * spec.n_layers * (5 + 12) * spec.n_kv_heads * spec.head_dim * spec.dtype.itemsize


def test_the_honest_cache_passes() -> None:
    Suite().test_attention_over_the_kept_entries()
    Suite().test_crop()


def fails(check: Callable[[], None], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check()


def test_a_cache_that_evicts_its_sinks() -> None:
    suite = Suite()
    suite.made = "knorm(budget=5, sinks=0, recent=1, slack=3)"
    fails(suite.test_attention_over_the_kept_entries, r"sink slot \d+ was evicted")


def test_a_cache_over_its_budget() -> None:
    suite = Suite()
    suite.made = "h2o(budget=6, sinks=1, recent=1, slack=3)"
    fails(suite.test_attention_over_the_kept_entries, r"sees 6 held entries > budget 5")


def test_a_cache_that_evicts_more_than_it_must() -> None:
    suite = Suite()
    suite.budget = 6
    fails(suite.test_attention_over_the_kept_entries, r"holds 5 of \d+ \(budget 6\)")


def test_a_cache_that_leaves_keys_past_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ScoredCache, "_moved", lambda self, layer, keys, slots, held, last: keys)
    fails(Suite().test_past_the_context, r"(a returned key is off|attention differs)")


@pytest.mark.parametrize(("wrong", "layer"), [(layer_0s, 1), (rope_bases, 0)])
def test_a_cache_that_moves_keys_by_other_frequencies(
    wrong: Callable[[dk.CacheSpec], list[Tensor | None]], layer: int
) -> None:
    """Before, the kit's specs had `rope_base` only: such a cache passed every check. The rest of the kit still passes
    it; `test_rotary_frequencies` names the layer whose keys are off."""

    class Wrong(Suite):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            cache = super().make(spec)
            cache._inv_freq = wrong(spec)  # type: ignore[attr-defined]
            return cache

    Wrong().test_past_the_context()  # the kit's rope_base spec: right by luck
    fails(Wrong().test_rotary_frequencies, rf"rope_frequencies .*: step \d+, layer {layer}, .*a returned key is off")
    Suite().test_rotary_frequencies()  # the real one passes


def assumes_rotary(spec: dk.CacheSpec) -> list[Tensor | None]:
    """Every layer's frequencies read as a tensor: a cache that assumes every model is rotary (crashes on None)."""
    return [spec.frequencies(layer).clone() for layer in range(spec.n_layers)]  # type: ignore[union-attr]


def default_base(spec: dk.CacheSpec) -> list[Tensor | None]:
    """`rope_base` or Llama's 10000 when it is None: a cache that moves the keys of a learned-position model."""
    return [frequencies(spec.layer_shape(layer)[1], spec.rope_base or 1e4) for layer in range(spec.n_layers)]


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (assumes_rotary, r"rope_base=None \(learned positions: .*\): AttributeError: .*; allowed: a cache that moves"),
        (default_base, r"rope_base=None \(learned positions: .*\): step \d+, layer \d, .*a returned key is off"),
    ],
)
def test_a_scored_cache_that_assumes_rotary_positions_fails_on_learned_ones(
    wrong: Callable[[dk.CacheSpec], list[Tensor | None]], message: str
) -> None:
    """Before, the scored kit had no learned-position spec: both passed every check, and met GPT-2 unchecked."""

    class Rotary(Suite):
        def make(self, spec: dk.CacheSpec) -> dk.KVCache:
            cache = super().make(spec)
            cache._inv_freq = wrong(spec)  # type: ignore[attr-defined]
            return cache

    Rotary().test_past_the_context()  # the kit's rotary spec: right there
    fails(Rotary().test_learned_positions, message)
    Suite().test_learned_positions()  # the real one passes


def test_a_crop_that_forgets_the_scores_of_the_queries_it_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    restore = LayerState.restore

    def careless(self: LayerState, forward: object, n: int, apply: object) -> None:
        restore(self, forward, n, lambda score, contributions: score)  # type: ignore[arg-type]

    monkeypatch.setattr(LayerState, "restore", careless)
    suite = Suite()
    suite.made = "tova(budget=5, sinks=1, recent=1, slack=3)"  # its score is one query's: a lost one shows
    fails(suite.test_crop, r"crop\(\d+\) then step \d+: differs from a cache fed up to")


def test_a_crop_that_keeps_the_scores_of_the_queries_it_takes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    restore = LayerState.restore

    def sticky(self: LayerState, forward: object, n: int, apply: object) -> None:
        score = self.score
        restore(self, forward, n, apply)  # type: ignore[arg-type]
        self.score = score

    monkeypatch.setattr(LayerState, "restore", sticky)
    suite = Suite()
    suite.made = "tova(budget=5, sinks=1, recent=1, slack=3)"
    fails(suite.test_crop, r"crop\(\d+\) then step \d+: differs from a cache fed up to")


def test_a_cache_that_hides_its_own_block(monkeypatch: pytest.MonkeyPatch) -> None:
    mask = ScoredCache.attention_mask

    def blind(self: ScoredCache, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """Later queries of a block do not see its first token."""
        m = mask(self, layer, positions).clone()
        st = self._layers[layer]
        first = st.length - positions.shape[1]
        hidden = (st.key_slots == first).repeat_interleave(self.spec.n_heads // st.key_slots.shape[1], 1)  # [B, H, S']
        m[:, :, 1:] &= ~hidden[:, :, None, :]
        st.mask = m
        return m

    monkeypatch.setattr(ScoredCache, "attention_mask", blind)
    fails(Suite().test_attention_over_the_kept_entries, r"sees block slots")


def test_a_cache_that_states_no_capacity_yet_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    suite = Suite()
    suite.made = "h2o(budget=5, sinks=1, recent=1, slack=3, prefill_only=True)"  # keeps every token after the prompt
    suite.test_capacity()  # it states spec.capacity: the honest one passes
    monkeypatch.setattr(ScoredCache, "capacity", sys.maxsize)
    fails(suite.test_capacity, r"stated capacity \d+, yet 1 tokens after 40 refused")


class KeysInHalfScattered(KeysInHalf):
    """The plain kit's float16-keys storage, also written by index (as a scored cache writes)."""

    def write_at(self, layer: int, index: Tensor, k: Tensor, v: Tensor) -> None:
        super().write_at(layer, index, k.half(), v)


class KeysInHalfCache(PreallocatedKVCache):
    storage = KeysInHalfScattered


class KeysInHalfPlugin:
    @dk.hookimpl
    def register_cache_backends(self, register: dk.hookspecs.Registrar) -> None:
        register("keys_in_half", KeysInHalfCache, description="test-only: keys stored in float16, values as given")


def test_a_scored_cache_over_a_storage_that_rounds_keys_only_states_it_and_passes() -> None:
    """As the plain kit's: `round_trip` is applied to keys and values alike, so an h2o over a float16-keys
    storage could not be stated (and failed the reference however it was)."""

    class KeysInHalf(Suite):
        made = "h2o(budget=5, sinks=1, recent=1, slack=3, store='keys_in_half')"

        def round_trip_keys(self, x: Tensor) -> Tensor:
            return x.half().to(x.dtype)

    plugin = KeysInHalfPlugin()
    dk.register_plugin(plugin, name="test-keys-in-half")
    try:
        KeysInHalf().test_attention_over_the_kept_entries()
        with pytest.raises(AssertionError, match="a returned key is off by"):
            Suite.test_attention_over_the_kept_entries(type("Unstated", (Suite,), {"made": KeysInHalf.made})())
    finally:
        dk.unregister_plugin(plugin)


def test_the_honest_crop_rows_passes() -> None:
    Suite().test_crop_rows()


def test_crop_rows_that_moves_every_row_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row restored right, but every row moved by row 0's amount: row 1's entries sit at other slots."""
    restore_rows = LayerState.restore_rows

    def alike(self: LayerState, ends: list[int], length: int, empty: list[bool], apply: object) -> None:
        restore_rows(self, ends, length, empty, apply)
        undo = torch.tensor([end - ends[0] for end in ends])[:, None, None]  # each row's own move, then row 0's
        self.slots = torch.where(self.slots >= 0, self.slots + undo, -1)

    monkeypatch.setattr(LayerState, "restore_rows", alike)
    fails(Suite().test_crop_rows, r"after crop_rows\(\[17, 19\], 19\): step 0, layer 0, .*holds \d+ of 16 ")  # row 1's


def test_crop_rows_that_does_not_bring_back_what_was_evicted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row 0 is taken back over three single-token forwards, each of which evicted an entry: those come back."""
    restore_rows = LayerState.restore_rows

    def forgetful(self: LayerState, ends: list[int], length: int, empty: list[bool], apply: object) -> None:
        alive = self.alive
        restore_rows(self, ends, length, empty, apply)
        self.alive = self.alive & alive

    monkeypatch.setattr(LayerState, "restore_rows", forgetful)
    fails(Suite().test_crop_rows, r"after crop_rows\(\[17, 19\], 19\): step 0, layer 0, .*query 19: holds \d+ of 17")


def test_crop_rows_that_cuts_a_long_block_at_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt not compressed yet, its rows cut at one slot (the longest row's), not each at its own: row 0 keeps
    a token it gave back."""
    monkeypatch.setattr(Block, "align", lambda self, kept, held: self.cut(self.start + max(kept), held))
    fails(Suite().test_crop_rows, r"a prompt, then crop_rows\(\[17, 19\], 19\): step \d+, .*row 0")


def test_a_crop_rows_past_the_record_is_refused() -> None:
    spec = dk.CacheSpec(n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, batch_size=2, capacity=64, max_positions=64)
    cache = dk.create_cache("h2o(budget=5, sinks=1, recent=1, slack=3)", spec)
    for T in (8, *[1] * 8):
        cache.update(0, torch.randn(2, 1, T, 4), torch.randn(2, 1, T, 4))
        cache.attention_mask(0, torch.arange(cache.length - T, cache.length).expand(2, T))
        cache.observe(0, torch.randn(2, 2, T, 4))  # type: ignore[attr-defined]
    allowed = r"allowed: 10 <= ends\[1\] <= 16, or ends\[1\] <= 0 \(the row keeps none of its tokens\)"
    with pytest.raises(dk.ParameterError, match=rf"h2o.crop_rows: ends\[1\]=9 is invalid: .*{allowed}"):
        cache.crop_rows([16, 9], 16)  # type: ignore[attr-defined]
    cache.crop_rows([16, 10], 16)  # type: ignore[attr-defined]  # within the record
    assert cache.length == 16

"""Conformance checks for a model (`model(input_ids [B, T], positions [B, T], cache) -> logits [B, T, V]` and
`model.spec`) and their pytest suite: what the decode loop relies on, on a left-padded ragged batch of token ids.

- **A forward that repeats**: the batch fed twice gives the same logits (a model left in training mode draws its
  dropout anew, which each check below would blame on what it compares).
- **Rows independent of padding**: each row's logits in the batch (its positions start at 0 after its padding,
  which holds arbitrary ids) equal its logits fed alone; a model that reads slots for positions, or attends to
  padding, gives each row's text a dependence on the rest of its batch.
- **The cache holds what a forward recomputes**: fed through a cache that keeps every token, in blocks of several
  sizes (the prompt in two, then tokens one by one), every block's logits equal a fresh forward over the whole
  sequence without a cache (`cache=None`, the path `cache="none"` decodes with).
- **Keys in any order**: the same through a cache that evicts nothing but hands its keys back last slot first,
  as a cache that evicts may (`window`'s ring): a model that reads a key's position from its index in what
  `update` returned (an ALiBi bias, a sliding window of its own) decodes wrong through `window` and the scored
  caches without an error. Skipped where the model's `validate_cache` refuses such a cache and takes one that keeps
  every token in slot order (a refusal of both is not of the key order: checked then).
- **The last column alone**: where the model says `supports_last_only`, `last_only=True` gives a forward's last
  column, `[B, 1, V]`, with and without a cache (every prefill without `prompt_logprobs` asks for it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from decodekit.cache import KVCache, PreallocatedKVCache
from decodekit.errors import ParameterError
from decodekit.model import check_call, model_device_dtype
from decodekit.spec import CacheSpec

__all__ = [
    "ModelConformance",
    "check_model",
    "check_model_cache",
    "check_model_key_order",
    "check_model_last_only",
    "check_model_rows",
    "default_tolerance",
]

_LENGTHS = (6, 2, 4)  # prompt lengths of the ragged batch
_NEW = 5  # tokens fed one at a time after the prompts


def _forward(model: Any, ids: Tensor, positions: Tensor, cache: Any, *, last_only: bool = False) -> Tensor:
    with torch.no_grad():
        logits = model(ids, positions, cache, **({"last_only": True} if last_only else {}))
    B, T = ids.shape
    V = model.spec.vocab_size
    shape = tuple(logits.shape) if isinstance(logits, Tensor) else None
    got = f"logits of shape {shape}" if shape is not None else f"a {type(logits).__name__}, not a tensor,"
    asked, want = (" with last_only=True", (B, 1, V)) if last_only else ("", (B, T, V))
    which = "the last position's logits" if last_only else "every position's logits"
    assert isinstance(logits, Tensor) and shape == want, (
        f"model: {got} for input_ids {(B, T)}{asked}; allowed: [B, {'1' if last_only else 'T'}, vocab_size] = {want}, "
        f"{which}"
    )
    return logits.double()


def default_tolerance(dtype: torch.dtype) -> float:
    """How far a sound model's logits part, relative to the largest: 1e-4, or 4 units of a half dtype's
    epsilon (bfloat16 0.031, float16 0.0039), its own rounding (a 12-layer model's reached 0.013 in bfloat16);
    the flaws the kit finds part by 0.24 and more."""
    return max(1e-4, 4 * torch.finfo(dtype).eps)


def _assert_close(actual: Tensor, expected: Tensor, what: str, allowed: str, tolerance: float) -> None:
    worst = float((actual - expected).abs().max())
    scale = max(1.0, float(expected.abs().max()))
    assert worst <= tolerance * scale, (
        f"{what}: logits differ by {worst:.3g} > {tolerance:g} of the largest logit ({scale:.3g}); allowed: {allowed}"
    )


class _Batch:
    """The ragged batch the checks feed: prompts of `_LENGTHS` left-padded (random ids in the padding too),
    then `_NEW` tokens each; `positions` negative on padding, as the decode loop gives them."""

    def __init__(self, model: Any, seed: int, tolerance: float | None) -> None:
        check_call(model)  # a forward(input_ids) is told so, not a TypeError from the first check's call
        self.device, self.dtype = model_device_dtype(model)  # as the decode loop builds its caches
        self.tolerance = default_tolerance(self.dtype) if tolerance is None else tolerance
        device = self.device
        longest = max(_LENGTHS)
        self.total = longest + _NEW
        if (context := model.spec.max_positions) < self.total:  # positions past it: a learned table's IndexError
            raise ParameterError(
                f"model kit: ModelSpec.max_positions={context} is invalid here: the kit feeds rows of up to "
                f"{self.total} positions; allowed: max_positions >= {self.total} (a model built with a longer context)"
            )
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, model.spec.vocab_size, (len(_LENGTHS), self.total), generator=g).to(device)
        self.pads = [longest - n for n in _LENGTHS]
        self.positions = (torch.arange(self.total)[None] - torch.tensor(self.pads)[:, None]).to(device)
        self.blocks = (2, longest - 2, *[1] * (_NEW - 3), 3)  # the prompts in two blocks, one by one, then 3


def _whole_batch(model: Any, batch: _Batch) -> Tensor:
    """The batch's logits without a cache, the same when fed again: else each check would blame what it compares
    (a model left in training mode draws its dropout anew in every forward)."""
    try:
        first = _forward(model, batch.ids, batch.positions, None)
    except (AssertionError, ParameterError):
        raise
    except Exception as exc:  # a model written for a cache alone: 'NoneType' object has no attribute 'update'
        raise AssertionError(
            f"model: a forward without a cache (cache=None) raised {type(exc).__name__}: {exc}; allowed: logits over "
            "the tokens passed in, causal and padding-aware (cache='none' decodes so, and the kit checks every cache "
            "against it: docs/concepts.md, Models)"
        ) from exc
    mode = " (it is in training mode: model.eval() turns dropout off)" if getattr(model, "training", False) else ""
    again = _forward(model, batch.ids, batch.positions, None)
    _assert_close(again, first, f"model: the same batch fed twice{mode}", "a forward that repeats", batch.tolerance)
    return first


def check_model_rows(model: Any, *, seed: int = 0, tolerance: float | None = None) -> None:
    """Each row's logits in the left-padded batch equal its logits fed alone."""
    batch = _Batch(model, seed, tolerance)
    full = _whole_batch(model, batch)
    for b, pad in enumerate(batch.pads):
        alone = _forward(model, batch.ids[b : b + 1, pad:], batch.positions[b : b + 1, pad:], None)
        what = f"model: row {b} (a prompt of {_LENGTHS[b]} tokens after {pad} of padding) in the batch vs alone"
        allowed = "the same logits (positions are the model's argument, not its slots; padding is never attended)"
        _assert_close(full[b : b + 1, pad:], alone, what, allowed, batch.tolerance)


class _KeysLastFirst(PreallocatedKVCache):
    """Keeps every token, but hands the keys back last slot first, as a cache that evicts may (a ring buffer); it
    states a `reach`, so a model that refuses such caches (`validate_cache`) refuses it."""

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        k, v = super().update(layer, k, v)
        return k.flip(2), v.flip(2)

    def attention_mask(self, layer: int, positions: Tensor) -> Tensor:
        return super().attention_mask(layer, positions).flip(-1)

    def reach(self, new: int) -> int:
        return self.length + new


def _cache_spec(model: Any, batch: _Batch) -> CacheSpec:
    return CacheSpec.for_model(
        model.spec, batch_size=len(_LENGTHS), capacity=batch.total, dtype=batch.dtype, device=batch.device
    )


def _check_blocks(model: Any, batch: _Batch, cache: KVCache, fed: str, allowed: str) -> None:
    """Fed through `cache` block by block, each block's logits equal a fresh forward over the whole sequence."""
    start = 0
    for size in batch.blocks:
        stop = start + size
        ids, positions = batch.ids[:, :stop], batch.positions[:, :stop]
        cached = _forward(model, ids[:, start:], positions[:, start:], cache)
        fresh = _forward(model, ids, positions, None)[:, start:]
        real = (positions[:, start:] >= 0)[..., None]  # padding's logits are nobody's
        what = f"model: slots {start}..{stop - 1} fed through {fed} vs a forward without a cache"
        _assert_close(cached * real, fresh * real, what, allowed, batch.tolerance)
        start = stop


def check_model_cache(model: Any, *, seed: int = 0, tolerance: float | None = None) -> None:
    """Fed through a cache that keeps every token, block by block, each block's logits equal a fresh forward
    over the whole sequence without a cache."""
    batch = _Batch(model, seed, tolerance)
    _whole_batch(model, batch)
    allowed = (
        "the same logits (each layer feeds cache.update its new keys and attends over what it returns under "
        "cache.attention_mask, a step of one token too: a left-padded row's padding is among the keys)"
    )
    _check_blocks(model, batch, PreallocatedKVCache(_cache_spec(model, batch)), "PreallocatedKVCache", allowed)


def _refusal(model: Any, cache: KVCache, reach: int) -> str | None:
    """The `ParameterError` of the model's `validate_cache` for `cache`, None where it takes it (or has none)."""
    if callable(validate := getattr(model, "validate_cache", None)):
        try:
            validate(cache, reach)
        except ParameterError as exc:
            return str(exc)
    return None


def check_model_key_order(model: Any, *, seed: int = 0, tolerance: float | None = None) -> str | None:
    """The same as `check_model_cache` through a cache that hands its keys back last slot first; returns the
    model's refusal (its `validate_cache`'s `ParameterError`) where it refuses such a cache, else None.

    Only a refusal of what such a cache is (it evicts, it moves keys) exempts the model: where `validate_cache` refuses
    as well the same spec's `PreallocatedKVCache`, which keeps every token in slot order, it refused for something
    else (the spec's rows, capacity, dtype; a list of caches by name), and the check runs."""
    batch = _Batch(model, seed, tolerance)
    _whole_batch(model, batch)
    spec = _cache_spec(model, batch)
    cache = _KeysLastFirst(spec)
    refusal = _refusal(model, cache, batch.total)
    also = refusal is not None and _refusal(model, PreallocatedKVCache(spec), batch.total) is not None
    if refusal is not None and not also:
        return refusal
    allowed = (
        "the same logits (a cache that evicts hands back its keys in any order: attend under cache.attention_mask, "
        "never by a key's index; a model that must, an ALiBi bias or a sliding window of its own, refuses caches "
        "that evict in its validate_cache, as decodekit.cache.evicts(cache) says"
    )
    if also:
        allowed += (
            f"; its validate_cache refused this cache, {refusal!r}, and as well one that keeps every token in slot "
            "order, so not for its key order"
        )
    _check_blocks(model, batch, cache, "a cache that hands back its keys last slot first", allowed + ")")
    return None


def check_model_last_only(model: Any, *, seed: int = 0, tolerance: float | None = None) -> bool:
    """Where the model says `supports_last_only`, `last_only=True` (what every prefill without `prompt_logprobs`
    asks) gives the last column of a forward over the whole batch, without a cache and through one; returns whether
    it was checked."""
    if not getattr(model, "supports_last_only", False):
        return False
    batch = _Batch(model, seed, tolerance)
    last = _whole_batch(model, batch)[:, -1:]
    allowed = "the logits of the last column, [B, 1, V] (the output projection of the last position alone)"
    fresh = PreallocatedKVCache(_cache_spec(model, batch))
    for fed, cache in (("without a cache", None), ("through PreallocatedKVCache", fresh)):
        got = _forward(model, batch.ids, batch.positions, cache, last_only=True)
        _assert_close(got, last, f"model: last_only=True {fed} vs a forward's last column", allowed, batch.tolerance)
    return True


def check_model(model: Any, *, seed: int = 0, tolerance: float | None = None) -> None:
    """Every model check, on prompts of 6, 2 and 4 random ids below `spec.vocab_size`, left-padded, then 5 more
    tokens each; raises `AssertionError` naming the rows or slots and how far the logits are apart (relative to
    the largest logit, at most `tolerance`; None: `default_tolerance` of the model's dtype)."""
    check_model_rows(model, seed=seed, tolerance=tolerance)
    check_model_cache(model, seed=seed, tolerance=tolerance)
    check_model_key_order(model, seed=seed, tolerance=tolerance)
    check_model_last_only(model, seed=seed, tolerance=tolerance)


class ModelConformance:
    """Subclass and define `make()` returning the model (`dk.load_model("name")` for a registered one)."""

    seed: int = 0
    tolerance: float | None = None  # None: default_tolerance of the model's dtype

    def make(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define make() returning the model")

    def test_rows_do_not_depend_on_padding(self) -> None:
        check_model_rows(self.make(), seed=self.seed, tolerance=self.tolerance)

    def test_cache_matches_a_forward_without_one(self) -> None:
        check_model_cache(self.make(), seed=self.seed, tolerance=self.tolerance)

    def test_keys_in_any_order(self) -> None:
        if (refusal := check_model_key_order(self.make(), seed=self.seed, tolerance=self.tolerance)) is not None:
            import pytest

            pytest.skip(f"the model refuses a cache that evicts: {refusal}")

    def test_last_only_is_the_last_column(self) -> None:
        if not check_model_last_only(self.make(), seed=self.seed, tolerance=self.tolerance):
            import pytest

            pytest.skip("the model does not say supports_last_only: every forward returns every column's logits")

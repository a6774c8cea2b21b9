"""The model kit (`decodekit.testing.check_model`) passes the models decodekit decodes and fails each flaw a model
author can make that the decode loop does not see itself: positions read from slots, padding attended, a cache
that is fed but not attended over, keys taken for their slots by their index, the last position's logits only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
import torch
import torch.nn.functional as F
from decodekit_gpt.gpt import GPT, GPTConfig
from torch import Tensor, nn

import decodekit as dk
from decodekit.cache import KVCache, cached_attention, evicts, slot_mask
from decodekit.testing import ModelConformance, check_model
from decodekit.testing.models import check_model_cache, check_model_key_order, check_model_rows, default_tolerance
from decodekit.testing.tiny_lm import TinyLM


class SlotPositions(TinyLM):
    """Numbers its tokens by slot, not by the positions it is given: consistent with and without a cache, so
    the two decode alike, but a left-padded row sees other positions than alone."""

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        start = 0 if cache is None else cache.length
        slots = torch.arange(start, start + positions.shape[1]).expand_as(positions)
        return super().forward(input_ids, slots.where(positions >= 0, positions), cache)


class OwnLM(nn.Module):
    """docs/concepts.md's model of one's own: learned positions, attention through the cache or `slot_mask`."""

    def __init__(self, vocab: int = 64, width: int = 16, heads: int = 2, layers: int = 2, context: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.qkv = nn.ModuleList(nn.Linear(width, 3 * width) for _ in range(layers))
        self.head = nn.Linear(width, vocab)
        self.spec = dk.ModelSpec(layers, heads, heads, width // heads, vocab, context)  # MHA, learned positions

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=slot_mask(torch.arange(q.shape[2]), positions, 0))

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        B, T = input_ids.shape
        x = self.embed(input_ids) + self.pos(positions.clamp(min=0))
        for layer, qkv in enumerate(self.qkv):
            q, k, v = qkv(x).view(B, T, 3, self.spec.n_heads, -1).permute(2, 0, 3, 1, 4)
            x = x + self.layer(layer, q, k, v, positions, cache).transpose(1, 2).reshape(B, T, -1)
        out: Tensor = self.head(x)
        return out

    def layer(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, cache: Any) -> Tensor:
        """One layer's attention (each flawed model below changes this alone)."""
        if cache is None:
            return self.attend(q, k, v, positions)
        k, v = cache.update(layer, k, v)
        return cached_attention(cache, layer, q, k, v, positions)


class AttendsPadding(OwnLM):
    """Without a cache, a plain causal mask: a left-padded row attends to its padding."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class MasklessStep(OwnLM):
    """Attends a step of one token over every key the cache returned, without its mask (a single query needs no
    causal mask): a left-padded row's step attends to its padding."""

    def layer(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, cache: Any) -> Tensor:
        if cache is None or q.shape[2] > 1:
            return super().layer(layer, q, k, v, positions, cache)
        k, v = cache.update(layer, k, v)
        return F.scaled_dot_product_attention(q, k, v)


class CacheAlone(OwnLM):
    """Written for a cache alone: every layer calls `cache.update`, so `cache=None` (cache="none", the kit's
    reference) is an AttributeError."""

    def layer(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, cache: Any) -> Tensor:
        k, v = cache.update(layer, k, v)
        return cached_attention(cache, layer, q, k, v, positions)


class WindowByIndex(OwnLM):
    """Attends over a sliding window of its own, reading each key's slot from its index in what `cache.update`
    returned: right through a cache that keeps slot order (dense, gqa, int8), wrong without an error through one
    that evicts (`window`'s ring, the scored caches)."""

    window = 2

    def layer(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, cache: Any) -> Tensor:
        T = q.shape[2]
        if cache is None:
            mask = slot_mask(torch.arange(T), positions, 0, window=self.window)
        else:
            k, v = cache.update(layer, k, v)
            S = k.shape[2]  # the flaw: the returned keys taken for slots 0..S-1
            mask = cache.attention_mask(layer, positions) & slot_mask(
                torch.arange(S), positions, S - T, window=self.window
            )
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class WindowRefusingEviction(WindowByIndex):
    """The same model, refusing the caches it cannot read (docs/concepts.md, Models)."""

    def validate_cache(self, cache: KVCache, reach: int) -> None:
        if evicts(cache):
            raise dk.ParameterError(
                f"WindowByIndex: cache {type(cache).__name__} is invalid: it evicts, and the model's window reads "
                "key slots by index; allowed: dense, gqa, int8"
            )


def _refuse_small_caches(cache: KVCache) -> None:
    """A rule about something else than the key order, which the kit's caches (11 slots) all break."""
    if cache.spec.capacity < 16:
        raise dk.ParameterError(f"model: capacity={cache.spec.capacity} is invalid; allowed: at least 16 slots")


class WindowRefusingSmallCaches(WindowByIndex):
    """The flawed window, whose `validate_cache` refuses every cache of fewer than 16 slots (and none for evicting)."""

    def validate_cache(self, cache: KVCache, reach: int) -> None:
        _refuse_small_caches(cache)


class OwnLMRefusingSmallCaches(OwnLM):
    """docs/concepts.md's model (it attends under the cache's mask), refusing the same."""

    def validate_cache(self, cache: KVCache, reach: int) -> None:
        _refuse_small_caches(cache)


class IgnoresTheCache(TinyLM):
    """Attends over the tokens of each call only: every decode step forgets the prompt."""

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        return super().forward(input_ids, positions, None)


class DropsOut(TinyLM):
    """Dropout on its hidden states, left in training mode (a module is built so): every forward draws anew."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.dropout = nn.Dropout(0.1)
        self.train()  # TinyLM turns eval() itself; a module of one's own starts in training mode

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        out: Tensor = self.dropout(super().forward(input_ids, positions, cache))
        return out


class LastPositionOnly(TinyLM):
    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        return super().forward(input_ids, positions, cache)[:, -1:]


class FirstColumnForLast(TinyLM):
    """Says `supports_last_only`, and projects the first column for it: every prefill then decodes from the logits
    after a row's first token (padding, in a left-padded row)."""

    supports_last_only = True

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None, last_only: bool = False) -> Tensor:
        out = super().forward(input_ids, positions, cache)
        return out[:, :1] if last_only else out


class InTuple(TinyLM):
    """The logits in a tuple, as transformers' models return them with `return_dict=False`."""

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Any:
        return (super().forward(input_ids, positions, cache),)


SOUND = {
    "TinyLM rope": lambda: TinyLM(64),
    "TinyLM learned, GQA": lambda: TinyLM(64, n_heads=4, n_kv_heads=2, position="learned"),
    "TinyLM in float64": lambda: TinyLM(64).double(),  # its cache in the model's dtype, as the decode loop's
    "the reference GPT": lambda: GPT(GPTConfig(vocab_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=32)).eval(),
    "tiny-shakespeare": lambda: dk.load_model("tiny-shakespeare"),
    "docs/concepts.md's own model": OwnLM,
    "a window by index, refusing caches that evict": WindowRefusingEviction,
}


@pytest.mark.parametrize("make", SOUND.values(), ids=SOUND.keys())
def test_the_kit_passes_the_models_decodekit_decodes(make: Callable[[], Any]) -> None:
    check_model(make())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("make", SOUND.values(), ids=SOUND.keys())
def test_the_kit_passes_them_in_half_precision(make: Callable[[], Any], dtype: torch.dtype) -> None:
    """Their own rounding (up to 0.0072 of the largest logit in bfloat16 here) is no flaw; before, every one failed
    the default tolerance of 1e-4 (`row 1 ... logits differ by 0.00781 > 0.0001`), blaming the model."""
    check_model(make().to(dtype))
    check_model(make().to(dtype), tolerance=None)  # the default, said


FLAWS = [
    pytest.param(check_model_rows, SlotPositions, "row 1 .* in the batch vs alone: logits differ", id="slots"),
    pytest.param(check_model_rows, AttendsPadding, "padding is never attended", id="padding"),
    pytest.param(check_model_cache, IgnoresTheCache, "slots 2..5 fed through PreallocatedKVCache", id="no cache"),
    # before: "allowed: the same logits (each layer ... attends over what it returns)", which it did
    pytest.param(
        check_model_cache, MasklessStep, r"slots 6..6 .*under cache.attention_mask, a step of one token too", id="mask"
    ),
    # before: passed, and the model decoded wrong through window and the scored caches without an error
    pytest.param(
        check_model, WindowByIndex, "fed through a cache that hands back its keys last slot first", id="key order"
    ),
    # before: "row 0 (... after 0 of padding) in the batch vs alone: ... positions are the model's argument ...",
    # and ModelConformance's cache test blamed the cache
    pytest.param(
        check_model_rows, DropsOut, r"the same batch fed twice \(it is in training mode: model.eval", id="rows: dropout"
    ),
    pytest.param(
        check_model_cache, DropsOut, r"the same batch fed twice \(it is in training mode", id="cache: dropout"
    ),
    pytest.param(
        check_model, LastPositionOnly, r"logits of shape \(3, 1, 64\).*allowed: \[B, T, vocab_size\]", id="shape"
    ),
    # before: the model's own "AttributeError: 'NoneType' object has no attribute 'update'", from the kit
    pytest.param(
        check_model,
        CacheAlone,
        r"a forward without a cache \(cache=None\) raised AttributeError: 'NoneType' object has no attribute 'update'",
        id="cache alone",
    ),
    # before: passed, and dk.generate decoded from each row's first column after the prefill
    pytest.param(
        check_model, FirstColumnForLast, r"last_only=True without a cache vs a forward's last column", id="last only"
    ),
    # before: "logits of shape ()", as if the model had returned a scalar
    pytest.param(
        check_model, InTuple, r"a tuple, not a tensor, for input_ids .*allowed: \[B, T, vocab_size\]", id="tuple"
    ),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(("check", "broken", "message"), FLAWS)
def test_the_kit_fails_each_flaw(
    check: Callable[[Any], None], broken: type[nn.Module], message: str, dtype: torch.dtype
) -> None:
    model = broken(64).to(dtype)
    with pytest.raises(AssertionError, match=message):
        check(model if broken is DropsOut else model.eval())


class SlightlyPadded(TinyLM):
    """A padded row's logits `1 + flaw` times its own: a flaw below its dtype's default tolerance."""

    def __init__(self, vocab_size: int, flaw: float) -> None:
        super().__init__(vocab_size)
        self.flaw = flaw

    def forward(self, input_ids: Tensor, positions: Tensor, cache: Any = None) -> Tensor:
        out = super().forward(input_ids, positions, cache)
        return torch.where((positions < 0).any(-1)[:, None, None], out * (1 + self.flaw), out)


@pytest.mark.parametrize(("dtype", "flaw", "tolerance"), [(torch.float32, 1e-5, 1e-6), (torch.bfloat16, 0.01, 1e-3)])
def test_a_tolerance_given_rules_over_the_dtypes(dtype: torch.dtype, flaw: float, tolerance: float) -> None:
    """Before: a bfloat16 TinyLM's own rounding at 1e-6, which a CPU whose kernels round a row alike alone and in
    the batch (this AMD EPYC's) never showed: the check passed and the test failed."""
    model = SlightlyPadded(64, flaw).to(dtype)
    check_model(model)  # within the dtype's default
    with pytest.raises(AssertionError, match=rf"logits differ by .* > {tolerance:g} of the largest logit"):
        check_model(model, tolerance=tolerance)
    assert default_tolerance(torch.float32) == 1e-4
    assert default_tolerance(torch.bfloat16) == 4 * 2**-7 and default_tolerance(torch.float16) == 4 * 2**-10


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_a_context_shorter_than_the_kits_rows_is_refused_naming_it(position: Literal["learned", "rope"]) -> None:
    """Before: a learned table's bare `IndexError: index out of range in self`, and a rotary model checked at positions
    past its context, which no decode feeds it."""
    with pytest.raises(dk.ParameterError, match=r"max_positions=8 is invalid here: .* up to 11 positions"):
        check_model(TinyLM(64, max_positions=8, position=position))


def test_a_model_that_refuses_caches_that_evict_is_not_held_to_their_key_order() -> None:
    refusal = check_model_key_order(WindowRefusingEviction())
    assert refusal is not None and "cache _KeysLastFirst is invalid: it evicts" in refusal
    assert check_model_key_order(OwnLM()) is None  # checked: it attends under the cache's mask

    class Suite(ModelConformance):
        def make(self) -> WindowRefusingEviction:
            return WindowRefusingEviction()

    with pytest.raises(pytest.skip.Exception, match="the model refuses a cache that evicts: WindowByIndex: cache"):
        Suite().test_keys_in_any_order()  # skipped with the reason, never passed


def test_a_refusal_that_is_not_of_the_key_order_does_not_skip_its_check() -> None:
    """Any `ParameterError` from `validate_cache` skipped the check: a model that reads key slots by index and refuses
    small caches (the kit's too, whatever they do with keys) was never held to the key order. A refusal exempts the
    model only where it takes the same spec's cache that keeps every token in slot order."""
    with pytest.raises(AssertionError, match=r"last slot first.*capacity=11 is invalid.*so not for its key order"):
        check_model_key_order(WindowRefusingSmallCaches())

    class Suite(ModelConformance):
        def make(self) -> WindowRefusingSmallCaches:
            return WindowRefusingSmallCaches()

    with pytest.raises(AssertionError, match="last slot first"):
        Suite().test_keys_in_any_order()  # failed, not skipped
    assert check_model_key_order(OwnLMRefusingSmallCaches()) is None  # checked, and it attends under the mask


def test_the_docs_model_runs_on_another_device_than_the_cpu_without_a_cache() -> None:
    """docs/concepts.md's model masks with `slot_mask(torch.arange(T), positions, 0)`, its key slots on the CPU; on
    another device (meta stands in for a GPU) that was torch's `RuntimeError: Tensor on device meta is not on the
    expected device cpu!` (on a GPU, 'Expected all tensors to be on the same device') for cache="none" and the kit."""
    model = OwnLM().to("meta")
    positions = (torch.arange(5) - torch.tensor([[0], [3]])).to("meta")  # a row left-padded by 3
    logits = model(torch.zeros(2, 5, dtype=torch.long, device="meta"), positions, None)
    assert logits.device.type == "meta" and logits.shape == (2, 5, 64)


class TestTinyLM(ModelConformance):
    def make(self) -> TinyLM:
        return TinyLM(64)

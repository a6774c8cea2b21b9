"""A model written outside decodekit, the way docs/concepts.md ("Models") says, decodes what its own forward says.

`OwnLlama` is plain PyTorch (RMSNorm, its own rotary embedding, grouped-query attention, SwiGLU) that meets
decodekit only at the protocol: `spec`, `model(input_ids, positions, cache)`, `cache.update` and
`cached_attention`. The second implementation is its full-sequence forward without a cache, greedy-decoded by
hand one token at a time; every cache that keeps each token, beam search of one beam, speculative decoding and
`compile=True` must give its tokens, and `window` must give a forward over exactly the tokens it keeps.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from decodekit_speculative.strategy import SpeculativeGeneration
from torch import Tensor, nn

import decodekit as dk
from decodekit.cache import KVCache, cached_attention, observes, slot_mask

BASE = 10000.0
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [3, 1, 4, 1, 5, 9, 2, 6]]  # ragged: decoded left-padded in one batch
NEW = 16


def rotate_half(x: Tensor, positions: Tensor) -> Tensor:
    """x `[B, H, T, D]` rotated at `positions` `[B, T]` (padding at 0): pairs (x_i, x_{i+D/2}), angles in float64."""
    D = x.shape[-1]
    inv_freq = BASE ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = positions.clamp(min=0).double()[:, None, :, None] * inv_freq  # [B, 1, T, D/2]
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    rotary = True  # False: no positional encoding (NoPE), the causal mask alone orders the tokens

    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        nn.init.normal_(self.wq.weight, std=1.0)  # sharper attention than the default: which keys are seen matters
        self.wkv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.gate, self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, layer: int, positions: Tensor, cache: KVCache | None) -> Tensor:
        if cache is None:  # over the tokens passed in: causal, padding-aware
            mask = slot_mask(torch.arange(q.shape[2]), positions, 0)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        k, v = cache.update(layer, k, v)
        return cached_attention(cache, layer, q, k, v, positions)

    def forward(self, x: Tensor, layer: int, positions: Tensor, cache: KVCache | None) -> Tensor:
        B, T, C = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]
        kv = self.wkv(h).view(B, T, 2 * self.kv_heads, self.head_dim).transpose(1, 2)
        k, v = kv.chunk(2, dim=1)  # each [B, H_kv, T, D]
        if self.rotary:
            q, k = rotate_half(q, positions), rotate_half(k, positions)
        y = self.attend(q, k, v, layer, positions, cache)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = self.mlp_norm(x)
        out: Tensor = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return out


class OwnLlama(nn.Module):
    """A decoder-only transformer of its own, random weights from `seed`."""

    def __init__(self, *, layers: int = 2, vocab: int = 61, dim: int = 32, context: int = 64, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.embed = nn.Embedding(vocab, dim)
            self.blocks = nn.ModuleList(Block(dim, heads=4, kv_heads=2) for _ in range(layers))
            self.norm = RMSNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)
        self.spec = dk.ModelSpec(
            n_layers=layers, n_heads=4, n_kv_heads=2, head_dim=dim // 4, vocab_size=vocab, max_positions=context,
            rope_base=BASE,
        )  # fmt: skip
        self.eval()

    def forward(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor:
        x = self.embed(input_ids)
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, positions, cache)
        out: Tensor = self.head(self.norm(x))
        return out


@torch.no_grad()
def greedy_by_hand(model: OwnLlama, prompt: list[int], new: int, *, window: int = 0, sinks: int = 0) -> list[int]:
    """The second implementation: the argmax of a fresh forward over the whole sequence, `new` times; with a
    `window`, over the first `sinks` tokens and the last `window` only, at positions 0.. (rotary: distances)."""
    ids = list(prompt)
    for _ in range(new):
        seen = ids[:sinks] + ids[max(sinks, len(ids) - window) :] if window else ids
        logits = model(torch.tensor([seen]), torch.arange(len(seen))[None], None)[0, -1]
        ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


@pytest.fixture(scope="module")
def model() -> OwnLlama:
    return OwnLlama()


@pytest.fixture(scope="module")
def reference(model: OwnLlama) -> list[list[int]]:
    return [greedy_by_hand(model, p, NEW) for p in PROMPTS]


# Each keeps every token of these 24: a budget or window of the whole context evicts nothing.
KEEPING_ALL = ["none", "dense", "gqa", "int8", "window(size=60, sinks=4)", "h2o(budget=64)", "snapkv(budget=64)"]


@pytest.mark.parametrize("cache", KEEPING_ALL)
def test_every_cache_that_keeps_every_token_decodes_its_forward(
    model: OwnLlama, reference: list[list[int]], cache: str
) -> None:
    assert dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW, cache=cache).tokens == reference


def test_window_decodes_a_forward_over_the_tokens_it_keeps() -> None:
    """One layer: a key depends on its token and position alone, so the window's logits are a fresh forward over
    its sinks and its last `size` tokens; the sinks are moved by the model's own rotation (`rope_base`)."""
    one = OwnLlama(layers=1, context=32)
    for prompt in PROMPTS:
        kept = greedy_by_hand(one, prompt, 40, window=8, sinks=2)
        assert kept != greedy_by_hand(one, prompt, 40)  # the eviction changes the tokens: the check can fail
        out = dk.generate(one, [prompt], chain="greedy", max_new_tokens=40, cache="window(size=8, sinks=2)")
        assert out.tokens[0] == kept


class AttendsByHand(Block):
    """Attends under the cache's mask with SDPA of its own, not `cached_attention`; `hands_queries`: it hands its
    queries to a cache that observes, as docs/concepts.md ("Models") says."""

    hands_queries = False

    def attend(self, q: Tensor, k: Tensor, v: Tensor, layer: int, positions: Tensor, cache: KVCache | None) -> Tensor:
        if cache is None:
            return super().attend(q, k, v, layer, positions, cache)
        k, v = cache.update(layer, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=cache.attention_mask(layer, positions), enable_gqa=True)
        if self.hands_queries and observes(cache):
            cache.observe(layer, q)  # type: ignore[attr-defined]
        return y


class HandsItsQueries(AttendsByHand):
    hands_queries = True


@pytest.mark.parametrize("cache", ["h2o(budget=64)", "tova(budget=64)", "snapkv(budget=64)"])
def test_a_model_that_attends_by_hand_decodes_through_a_cache_that_observes_when_it_hands_its_queries(
    reference: list[list[int]], cache: str
) -> None:
    by_hand = OwnLlama()
    for block in by_hand.blocks:
        block.__class__ = HandsItsQueries
    assert dk.generate(by_hand, PROMPTS, chain="greedy", max_new_tokens=NEW, cache=cache).tokens == reference
    for block in by_hand.blocks:
        block.__class__ = AttendsByHand
    with pytest.raises(dk.PluginError, match="was fed again before the model handed its queries to observe"):
        dk.generate(by_hand, PROMPTS, chain="greedy", max_new_tokens=NEW, cache=cache)


class NoPositions(Block):
    rotary = False


def test_a_model_without_positional_encoding_goes_past_its_context_through_a_cache_that_evicts() -> None:
    """Its keys carry no position, so any cache may keep them anywhere: `rope_frequencies=((),)` says so. Before,
    ModelSpec refused `()`, and without it the engine refused the decode ('its positions are absolute (not
    rotary)')."""
    nope = OwnLlama(layers=1, context=32)
    nope.blocks[0].__class__ = NoPositions
    nope.spec = dataclasses.replace(nope.spec, rope_base=None, rope_frequencies=((),))
    for prompt in PROMPTS:
        kept = greedy_by_hand(nope, prompt, 40, window=8, sinks=2)  # 48 tokens at most: past the context of 32
        assert kept != greedy_by_hand(nope, prompt, 40)  # the eviction changes the tokens: the check can fail
        out = dk.generate(nope, [prompt], chain="greedy", max_new_tokens=40, cache="window(size=8, sinks=2)")
        assert out.tokens[0] == kept
    assert len(dk.generate(nope, PROMPTS, chain="greedy", max_new_tokens=40, cache="h2o(budget=16)").tokens[2]) == 40


class UpdatesEveryLayerFirst(OwnLlama):
    """Every layer's keys from the embedding (a shared source, as in YOCO), all written before any layer attends:
    each layer then asks its mask before attending over what its `update` returned, as the protocol asks."""

    def forward(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor:
        assert cache is not None, "decoded through a cache only"
        x, blocks = self.embed(input_ids), cast(list[Block], list(self.blocks))
        B, T, C = x.shape
        read = []
        for layer, block in enumerate(blocks):
            kv = block.wkv(block.attn_norm(x)).view(B, T, 2 * block.kv_heads, block.head_dim).transpose(1, 2)
            k, v = kv.chunk(2, dim=1)
            read.append(cache.update(layer, rotate_half(k, positions), v))
        for layer, block in enumerate(blocks):
            q = block.wq(block.attn_norm(x)).view(B, T, block.heads, block.head_dim).transpose(1, 2)
            y = cached_attention(cache, layer, rotate_half(q, positions), *read[layer], positions)
            x = x + block.wo(y.transpose(1, 2).reshape(B, T, C))
        out: Tensor = self.head(self.norm(x))
        return out


def test_copies_prefilled_once_decode_a_model_that_updates_every_layer_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the prefill's view of the cache (a prompt's copies computed once) completed only the latest update's
    keys when a mask was asked, so layer 0 attended over `window`'s unfilled moved sinks: 'NumericsError: step 0,
    row 0: cannot pick a token: the model's logits contain NaN'."""
    model, long, short = UpdatesEveryLayerFirst(context=32), PROMPTS[2] * 3, PROMPTS[1]
    options: dict[str, Any] = {"max_new_tokens": 8, "seed": [1, 2, 3, 4], "cache": "window(size=8, sinks=2)"}
    # side by side (the view hands out views), and spaced unevenly (it gathers, then follows the cache's completion)
    for prompts in ([long, long, short, short], [long, short, short, PROMPTS[0] * 3]):
        shared = dk.generate(model, prompts, **options)
        with monkeypatch.context() as unshared:
            unshared.setattr("decodekit.engine.distinct_rows", lambda tokens, positions: None)
            assert shared.tokens == dk.generate(model, prompts, **options).tokens


def test_beam_of_one_and_speculation_decode_its_forward(model: OwnLlama, reference: list[list[int]]) -> None:
    noisy = OwnLlama()  # the draft: a perturbed copy, so it proposes some tokens the target rejects
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    beam = dk.decode(model, PROMPTS, strategy="beam", num_beams=1, max_new_tokens=NEW, cache="gqa")
    assert beam.tokens == reference
    speculative = dk.decode(
        model, PROMPTS, strategy="speculative", draft=noisy, k=3, chain="greedy", max_new_tokens=NEW, cache="gqa"
    )
    assert speculative.tokens == reference
    assert isinstance(speculative, SpeculativeGeneration)
    assert 0 < (speculative.acceptance_rate or 0.0) < 1  # the draft was tried and also rejected


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
def test_compiled_decodes_its_forward(model: OwnLlama, reference: list[list[int]]) -> None:
    compiled = dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW, cache="gqa", compile=True)
    assert compiled.tokens == reference


class LastColumnOnly(OwnLlama):
    """A common slip: the logits of the last position only, `[B, V]`, where the protocol wants `[B, T, V]`."""

    def forward(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor:
        return super().forward(input_ids, positions, cache)[:, -1]


class InTuple(OwnLlama):
    """Another slip: the logits in a tuple (transformers' `return_dict=False`), where the protocol wants the tensor."""

    def forward(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Any:
        return (super().forward(input_ids, positions, cache),)


def padded_vocabulary() -> OwnLlama:
    """nanoGPT's habit: a head wider than the tokenizer's vocabulary (GPT-2's 50,257 padded to 50,304)."""
    model = OwnLlama()
    model.spec = dataclasses.replace(model.spec, vocab_size=48)
    return model


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            padded_vocabulary,
            "model OwnLlama returned logits of shape ({rows}, 8, 61); allowed: {shape} = [{rows}, tokens, 48]",
        ),
        (
            LastColumnOnly,
            "model LastColumnOnly returned logits of shape ({rows}, 61); allowed: {shape} = [{rows}, tokens, 61]",
        ),
        (
            InTuple,
            "model InTuple returned a tuple, not a tensor; allowed: logits {shape} = [rows, tokens, 61]",
        ),
    ],
    ids=["wide", "2-d", "tuple"],
)
def test_logits_of_another_shape_than_the_spec_are_refused_at_the_first_forward(
    make: Callable[[], OwnLlama], message: str
) -> None:
    """Before: the padded head failed only once a padded id was picked, blamed on the strategy ('strategy sample:
    emitted token 59; allowed: an int in [0, 48)'), the 2-d logits were a TypeError from inside the loop, and the
    tuple an AttributeError ("'tuple' object has no attribute 'dim'")."""
    # beam: 4 rows a prompt, prefilled once each through a cache (docs/concepts.md, "The decode engine")
    cases = (("sample", "gqa", 3), ("sample", "none", 3), ("beam", "gqa", 3), ("beam", "none", 12))
    for strategy, cache, rows in cases:
        said = message.format(rows=rows, shape="[rows, tokens, spec.vocab_size]")
        with pytest.raises(dk.ParameterError) as refused:
            dk.decode(make(), PROMPTS, strategy=strategy, chain="greedy", max_new_tokens=NEW, cache=cache)
        assert str(refused.value) == said


class CountingForwards(OwnLlama):
    """`OwnLlama` that counts its forwards: a refusal at the first forward (the prefill) leaves `forwards == 1`."""

    forwards = 0

    def forward(self, input_ids: Tensor, positions: Tensor, cache: KVCache | None) -> Tensor:
        self.forwards += 1
        return super().forward(input_ids, positions, cache)


FED = "the model's layer 0 fed cache.update keys of 2 kv-heads of 8 dims ([B, H_kv, T, D])"  # OwnLlama's
WRONG_SPECS = {
    "n_kv_heads=4": f"ModelSpec: n_kv_heads=4 is invalid: {FED}; allowed: n_kv_heads=2, as the model feeds them",
    "head_dim=16": f"ModelSpec: head_dim=16 is invalid: {FED}; allowed: head_dim=8, as the model feeds them",
    "n_layers=1": "ModelSpec: n_layers=1 is invalid: the model fed cache.update(layer=1); allowed: n_layers > 1, "
    "one per layer that feeds the cache",
}


SCORED = ["h2o(budget=16)", "snapkv(budget=16)", "tova(budget=16)", "knorm(budget=16)", "streaming(budget=16)"]


@pytest.mark.parametrize(
    "cache", ["dense", "gqa", "int8", "window(size=8, sinks=2)", *SCORED, "h2o(budget=16, prefill_only=True)"]
)
@pytest.mark.parametrize("wrong", WRONG_SPECS)
def test_a_spec_that_does_not_match_the_model_is_refused_at_the_first_forward(wrong: str, cache: str) -> None:
    """Before: a torch RuntimeError from inside the storage (n_kv_heads, head_dim), an IndexError (too few layers;
    the scored caches' until 2026-12-04: they index their layers before the storage sees them)."""
    model = CountingForwards()
    field, value = wrong.split("=")
    changed: dict[str, Any] = {field: int(value)}
    model.spec = dataclasses.replace(model.spec, **changed)
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW, cache=cache)
    assert str(refused.value) == WRONG_SPECS[wrong]
    assert model.forwards == 1


def test_a_spec_whose_n_heads_is_not_the_models_is_refused_at_the_first_forward() -> None:
    """`dense` stores `n_heads` heads: 8 for OwnLlama's 4 query heads. Before: torch's RuntimeError from SDPA,
    'Number of heads in key and value must divide the number of heads in query', naming no field."""
    model = CountingForwards()
    model.spec = dataclasses.replace(model.spec, n_heads=8)
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW, cache="dense")
    assert str(refused.value) == (
        "ModelSpec: n_heads=8 is invalid: the model's layer 0 attends with queries of 4 heads ([B, H, T, D]) over "
        "the 8 key heads cache.update returned; allowed: n_heads=4, as the model's queries"
    )
    assert model.forwards == 1


def test_a_spec_with_more_layers_than_the_model_feeds_decodes_as_its_own() -> None:
    """Not refused: a model may feed the cache fewer layers than its spec (or none, as a model that ignores it);
    the unused layers cost memory only."""
    model = CountingForwards()
    expected = dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW).tokens
    model.spec = dataclasses.replace(model.spec, n_layers=model.spec.n_layers + 1)
    assert dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW).tokens == expected


@pytest.mark.parametrize("cache", ["gqa", "int8", "window(size=8, sinks=2)", "h2o(budget=16)"])
def test_keys_in_another_dtype_than_the_cache_are_refused_saying_so(
    cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bfloat16 model whose rotary embedding upcasts q and k to float32 and does not cast them back. Before:
    torch's "Expected query, key, and value to have the same dtype" from inside SDPA."""
    half = rotate_half
    monkeypatch.setattr(sys.modules[__name__], "rotate_half", lambda x, positions: half(x.float(), positions))
    model = OwnLlama().to(torch.bfloat16)
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=NEW, cache=cache)
    assert str(refused.value) == (
        "cached_attention: queries in torch.float32 are invalid: cache.update returns keys and values in the cache's "
        "dtype, torch.bfloat16 (the model's); allowed: queries in torch.bfloat16 (cast a float32 rotary embedding back)"
    )


class InputIdsOnly(nn.Module):
    """A newcomer's first model: its forward takes the ids alone."""

    def __init__(self, raises: bool = False) -> None:
        super().__init__()
        self.embed, self.raises = nn.Embedding(50, 8), raises
        self.spec = dk.ModelSpec(n_layers=1, n_heads=1, n_kv_heads=1, head_dim=8, vocab_size=50, max_positions=32)

    def forward(self, input_ids: Tensor, positions: Tensor | None = None, cache: KVCache | None = None) -> Tensor:
        if self.raises:
            raise TypeError("the model's own bug")
        return self.embed.weight[input_ids] @ self.embed.weight.T


class OnlyIds(InputIdsOnly):
    def forward(self, input_ids: Tensor) -> Tensor:  # type: ignore[override]
        return self.embed.weight[input_ids] @ self.embed.weight.T


class LastOnly(InputIdsOnly):
    supports_last_only = True  # so the engine passes last_only=True too, which this forward does not take


def test_a_forward_that_takes_only_input_ids_is_told_what_decodekit_calls_it_with() -> None:
    """`forward(self, input_ids)` got Python's "M.forward() takes 2 positional arguments but 4 were given" from the
    engine's prefill; the signature is read once, so a TypeError raised inside a model stays the model's."""
    from decodekit.testing import check_model

    said = (
        "model OnlyIds: its forward takes (input_ids), but decodekit calls it as "
        "forward(input_ids, positions, cache); allowed: forward(input_ids [B, T], positions [B, T], cache) -> "
        "logits [B, T, V], cache None or a KVCache (docs/concepts.md, Models)"
    )
    for call in (
        lambda m: dk.generate(m, [[1, 2]], chain="greedy", max_new_tokens=2, cache="none"),
        lambda m: dk.decode(m, [[1, 2]], strategy="beam(num_beams=2)", max_new_tokens=2, cache="dense"),
        check_model,
    ):
        with pytest.raises(dk.ParameterError) as err:
            call(OnlyIds())
        assert str(err.value) == said
    assert dk.generate(InputIdsOnly(), [[1, 2]], chain="greedy", max_new_tokens=2, cache="none").tokens
    with pytest.raises(TypeError, match="the model's own bug"):
        dk.generate(InputIdsOnly(raises=True), [[1, 2]], chain="greedy", max_new_tokens=2, cache="none")
    with pytest.raises(dk.ParameterError, match=r"forward\(input_ids, positions, cache, last_only=True\) \(its"):
        dk.generate(LastOnly(), [[1, 2]], chain="greedy", max_new_tokens=2, cache="none")


def test_the_caches_concepts_md_says_take_the_queries_are_those_that_observe() -> None:
    """docs/concepts.md ("Models") named `h2o` and `snapkv` as the caches handed the queries and said a model that
    attends by hand works with the others: `tova` observes too, and refuses such a model at its second forward (the
    test above, `tova` among its caches)."""
    text = " ".join((Path(__file__).parents[1] / "docs" / "concepts.md").read_text().split())
    named = re.search(r"hands the queries to the caches that score by attention \(([^)]*)\)", text)
    assert named is not None, "the sentence moved: point this test at it"
    observing = sorted(name for name, entry in dk.get_registry().caches.items() if observes(entry.load()))
    assert sorted(re.findall(r"`(\w+)`", named[1])) == observing

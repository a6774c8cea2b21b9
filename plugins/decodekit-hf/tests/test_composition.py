"""Speculation, caches and chains composed on transformers models: speculative greedy decoding equals
transformers' own `generate()` through every cache that keeps all, a sampled chain keeps its distribution under
speculation, caches that evict run under speculation and beam search, and `compile=True` gives eager's tokens.

Drafts: a noisy copy of the target (it agrees often, not always) and prompt lookup ("ngram"). Models: a
grouped-query Llama, GPT-2 (learned positions) and a Mistral whose sliding window covers the text."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from decodekit_beam.search import beam_search
from decodekit_hf import HFModel
from decodekit_speculative.strategy import SpeculativeGeneration
from scipy.stats import chi2_contingency

import decodekit as dk
from tinymodels import greedy_generation_config, left_padded

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]
NEW = 40
KEEP_ALL = ["dense", "gqa", "int8"]
EVICTING = [
    "window(size=8, sinks=2, slack=8)",
    "h2o(budget=16, sinks=2, recent=4, slack=8)",
    "snapkv(budget=16, sinks=2, recent=4, slack=8, window=4)",
    "tova(budget=16, sinks=2, recent=4, slack=8)",
]
# The same caches with room for the whole text (prompt + NEW < 64): nothing is evicted.
HOLDING_ALL = ["window(size=64, sinks=2, slack=8)", "h2o(budget=64, slack=8)", "snapkv(budget=64, slack=8)"]
HOLDING_ALL += ["tova(budget=64, slack=8)"]


def noisy_copy(hf: Any, scale: float = 0.03, seed: int = 1) -> Any:
    """The model with Gaussian noise of std `scale` on every weight: a draft that often agrees with it."""
    g = torch.Generator().manual_seed(seed)
    twin = copy.deepcopy(hf)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return twin.eval()


def transformers_greedy(hf: Any, prompts: list[list[int]], new: int) -> list[list[int]]:
    ids, mask = left_padded(prompts)
    out = hf.generate(ids, attention_mask=mask, generation_config=greedy_generation_config(max_new_tokens=new))
    tokens: list[list[int]] = out[:, ids.shape[1] :].tolist()
    return tokens


def mistral(build_arch: Any, sliding_window: int) -> Any:
    return build_arch("mistral", num_key_value_heads=2, sliding_window=sliding_window)


@pytest.fixture(scope="module", params=["llama", "gpt2", "mistral"])
def pair(request: pytest.FixtureRequest, build_arch: Any, build_gpt2: Any) -> tuple[str, Any, HFModel, HFModel]:
    """(name, transformers model, target, noisy draft): a grouped-query Llama, GPT-2 (seed 0's greedy text repeats
    one token, so every draft is accepted: seed 3) and a Mistral whose window covers the text (prompt + NEW)."""
    name = request.param
    hf = {"llama": lambda: request.getfixturevalue("llama"), "gpt2": lambda: build_gpt2(seed=3)}.get(
        name, lambda: mistral(build_arch, sliding_window=64)
    )()
    return name, hf, HFModel(hf), HFModel(noisy_copy(hf))


def speculate(model: HFModel, prompts: Any, draft: Any, k: int, new: int = NEW, **options: Any) -> Any:
    return dk.decode(model, prompts, strategy="speculative", draft=draft, k=k, max_new_tokens=new, **options)


@pytest.mark.parametrize("cache", KEEP_ALL)
def test_greedy_speculation_equals_transformers_generate(pair: tuple[str, Any, HFModel, HFModel], cache: str) -> None:
    """One prompt and a ragged batch (rows right-aligned by crop_rows), a noisy draft and prompt lookup, k = 1
    and 4: transformers' greedy tokens (int8, which rounds what it keeps: the same cache without speculation)."""
    name, hf, model, draft = pair
    for prompts in (PROMPTS[:1], PROMPTS):
        want = transformers_greedy(hf, prompts, NEW)
        if cache == "int8":
            want = dk.generate(model, prompts, chain="greedy", max_new_tokens=NEW, cache=cache).tokens
        assert len({tuple(t) for t in want}) == len(prompts)  # rows differ: each row's padding is its own
        for d in (draft, "ngram"):
            for k in (1, 4):
                out = speculate(model, prompts, d, k, chain="greedy", cache=cache)
                assert out.tokens == want, (name, cache, len(prompts), d, k)
                if d is draft:  # the draft is both accepted and rejected
                    assert 0 < sum(out.accepted) < sum(out.drafted), (name, cache, k)


def joint(tokens: list[list[int]]) -> Counter[tuple[int, ...]]:
    return Counter(tuple(t) for t in tokens)


def two_sample_p(a: Counter[tuple[int, ...]], b: Counter[tuple[int, ...]], min_count: int = 10) -> float:
    """Chi-square p-value that two samples come from one distribution; cells seen < min_count times pooled."""
    keys = sorted(set(a) | set(b))
    big = [key for key in keys if a[key] + b[key] >= min_count]
    rest = [key for key in keys if a[key] + b[key] < min_count]
    table = [[c[key] for key in big] + [sum(c[key] for key in rest)] for c in (a, b)]
    return float(chi2_contingency(table).pvalue)


@pytest.mark.slow
def test_a_sampled_chain_keeps_its_distribution_under_speculation(llama: Any) -> None:
    """2,000 seeded rows, three tokens each, through every kind of stage (penalties reading the drafted history,
    temperature, top-k, top-p, min-p): the joint distribution equals `dk.generate`'s (p > 1e-3); the draft's
    own differs (p < 1e-6), so the test can fail."""
    model, draft = HFModel(llama), HFModel(noisy_copy(llama))
    chain = "repetition_penalty(1.3) | frequency_penalty(0.8) | temperature(0.8) | top_k(8) | top_p(0.9)"
    chain += " | min_p(0.05)"
    prompts = [[9, 44, 44, 44, 9, 44]] * 2000
    plain = joint(dk.generate(model, prompts, chain=chain, max_new_tokens=3, seed=1).tokens)
    out = dk.decode(model, prompts, strategy="speculative", draft=draft, k=2, chain=chain, max_new_tokens=3, seed=2)
    assert isinstance(out, SpeculativeGeneration) and 0.1 * sum(out.drafted) < sum(out.accepted) < sum(out.drafted)
    assert two_sample_p(joint(out.tokens), plain) > 1e-3
    wrong = joint(dk.generate(draft, prompts, chain=chain, max_new_tokens=3, seed=3).tokens)
    assert two_sample_p(wrong, plain) < 1e-6


def alone(model: HFModel, prompts: list[list[int]], cache: str, **options: Any) -> list[list[int]]:
    """Each prompt's greedy tokens decoded alone through `cache` (a batch through a cache that evicts pads a row's
    sinks away, caches.md; speculation decodes such a batch a row at a time)."""
    return [
        dk.generate(model, [p], chain="greedy", max_new_tokens=NEW, cache=cache, **options).tokens[0] for p in prompts
    ]


@pytest.mark.parametrize("cache", HOLDING_ALL)
def test_an_evicting_cache_that_holds_the_text_decodes_as_dense(
    pair: tuple[str, Any, HFModel, HFModel], cache: str
) -> None:
    """Nothing evicted: speculation (a ragged batch, decoded a row at a time) gives transformers' greedy tokens,
    beam search dense's beams."""
    name, hf, model, draft = pair
    want = transformers_greedy(hf, PROMPTS, NEW)
    for d in (draft, "ngram"):
        assert speculate(model, PROMPTS, d, 3, chain="greedy", cache=cache).tokens == want, (name, d)
    beams = beam_search(model, PROMPTS, num_beams=3, cache=cache, max_new_tokens=12).tokens
    assert beams == beam_search(model, PROMPTS, num_beams=3, cache="dense", max_new_tokens=12).tokens, name


@pytest.mark.parametrize("cache", EVICTING)
def test_an_evicting_cache_under_speculation_and_beam(llama: Any, cache: str) -> None:
    """A text of 50 tokens through 16 (or a window of 8 and 2 sinks): speculation through `window` gives each
    row's tokens alone without speculation, as a verify block attends query by query as single steps would. A
    scored cache's verify block sees its drafts together, so once it evicts its tokens may differ (documented:
    speculative.md); it runs. Beam search with one beam is greedy through the same cache."""
    model, draft = HFModel(llama), HFModel(noisy_copy(llama))
    want = alone(model, PROMPTS, cache)
    assert want != transformers_greedy(llama, PROMPTS, NEW)  # it evicted what mattered
    for d in (draft, "ngram"):
        out = speculate(model, PROMPTS, d, 3, chain="greedy", cache=cache)
        if cache.startswith("window"):
            assert out.tokens == want, d
        assert [len(t) for t in out.tokens] == [NEW] * 3
    assert beam_search(model, PROMPTS[:1], num_beams=1, cache=cache, max_new_tokens=NEW).tokens == want[:1]
    beams = beam_search(model, PROMPTS, num_beams=3, cache=cache, max_new_tokens=NEW).tokens
    assert [len(t) for t in beams] == [NEW] * 3


def test_speculation_serves_a_sliding_window_model_whose_window_covers_the_text(build_arch: Any) -> None:
    """prompt + max_new_tokens = 50 = sliding_window: an evicting cache served it in `dk.generate` and beam search,
    and refused it under speculation ("a text of 55 tokens"): the cache's capacity counted the k + 1 look-ahead
    a batch of a cache that keeps every token needs, though speculation never feeds a row past its text."""
    hf = mistral(build_arch, sliding_window=50)
    model, draft = HFModel(hf), HFModel(noisy_copy(hf))
    window, h2o = EVICTING[:2]
    want = alone(model, PROMPTS[:1], window)
    for d in (draft, "ngram"):
        assert speculate(model, PROMPTS[:1], d, 4, chain="greedy", cache=window).tokens == want
        assert len(speculate(model, PROMPTS[:1], d, 4, chain="greedy", cache=h2o).tokens[0]) == NEW
    with pytest.raises(dk.ParameterError, match=r"sliding_window=50\) mask a text of 51 tokens"):
        speculate(model, PROMPTS[:1], draft, 4, new=NEW + 1, chain="greedy", cache="window(size=8, slack=8)")


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
def test_compile_gives_eager_tokens_through_an_evicting_cache(llama: Any) -> None:
    """compile=True through `window` on a transformers Llama failed in dynamo (`CacheAttention`, a frozen dataclass
    hashed by its fields, was hashed before they were set): a CompileError. Now it gives eager's tokens; the
    cache's steps run outside the graph (caches.md)."""
    model, cache = HFModel(llama), "window(size=4, sinks=2, slack=4)"  # a 10-token prompt: evicts at once
    eager = dk.generate(model, PROMPTS[:1], chain="greedy", max_new_tokens=8, cache=cache).tokens
    assert eager != transformers_greedy(llama, PROMPTS[:1], 8)
    assert dk.generate(model, PROMPTS[:1], chain="greedy", max_new_tokens=8, cache=cache, compile=True).tokens == eager


@pytest.mark.parametrize("cache", ["gqa", "window(size=8, sinks=2, slack=8)"])
def test_a_draft_in_another_dtype_than_the_target(llama: Any, cache: str) -> None:
    """A bfloat16 draft for a float32 target (a cheaper draft) failed in SDPA ("Expected query, key, and value to
    have the same dtype"): its cache took the target's dtype. Its own now; the tokens are the target's."""
    model, draft = HFModel(llama), HFModel(noisy_copy(llama).to(torch.bfloat16))
    for prompts in (PROMPTS[:1], PROMPTS):
        out = speculate(model, prompts, draft, 3, chain="greedy", cache=cache)
        assert out.tokens == alone(model, prompts, cache)
        assert 0 < sum(out.accepted) < sum(out.drafted)

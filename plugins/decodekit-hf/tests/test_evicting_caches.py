"""Caches that evict or observe, on transformers models: the window's StreamingLLM claim on a Llama, blocks
against single steps, the queries a cache observes against transformers' own attention weights, the
calibration of a transformers model, every scored cache and their strategies on the trained model."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_beam.search import beam_search
from decodekit_cache_window.calibration import attention_profile, calibrate
from decodekit_hf.model import HFModel

import decodekit as dk
from decodekit.cache import PreallocatedKVCache
from tinymodels import assert_window_moves_sinks_as_transformers


def llama(n_layers: int, seed: int = 0, context: int = 128, **overrides: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=96,
        max_position_embeddings=context,
        initializer_range=0.2,
        **overrides,
    )
    return LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("arch", ["llama", "mixtral", "qwen3", "gemma", "phi3", "olmo2", "starcoder2"])
@torch.no_grad()
def test_one_layer_window_equals_recomputing_sinks_plus_window(build_arch: Any, arch: str) -> None:
    """StreamingLLM's claim, exactly, through transformers' Llama and the architectures that share its rotary
    embedding: with one layer the window through the cache equals a fresh forward over the sinks and the last
    `size` tokens at positions 0 .. S-1, far past the model's context (the sinks moved by decodekit.rope, the
    rest rotated by transformers). Mixtral, Gemma, Phi-3, ... had no rope_base: their sinks were not moved."""
    hf = (
        llama(n_layers=1, context=32)
        if arch == "llama"
        else build_arch(arch, num_hidden_layers=1, max_position_embeddings=32)
    )
    assert_window_moves_sinks_as_transformers(hf, HFModel(hf))


@pytest.mark.parametrize("arch", ["stablelm", "nemotron", "falcon", "opt", "cohere"])
@torch.no_grad()
def test_one_layer_window_keeps_positions_where_keys_cannot_move(build_arch: Any, arch: str) -> None:
    """Within the context a model whose keys decodekit cannot re-rotate (another rotary layout, learned positions)
    keeps each key where it was: with one layer the window through the cache equals a fresh forward over the sinks
    and the last `size` tokens at their own positions, at every step. Fed in blocks of 4 (a block attends through
    the cache's own mask, which StableLM's and Nemotron's layers never reached)."""
    hf = build_arch(arch, num_hidden_layers=1)
    model, size, sinks = HFModel(hf), 8, 2
    assert model.spec.rope_base is None
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(1))
    cache = dk.create_cache(
        f"window(size={size}, sinks={sinks}, slack=4)", dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1)
    )
    for a in range(0, 48, 4):
        got = model(ids[:, a : a + 4], torch.arange(a, a + 4)[None], cache)
        for i, t in enumerate(range(a, a + 4)):
            kept = [*range(min(sinks, max(0, t - size + 1))), *range(max(0, t - size + 1), t + 1)]
            want = hf(ids[:, kept], position_ids=torch.tensor([kept])).logits[:, -1]
            torch.testing.assert_close(got[:, i], want, atol=1e-4, rtol=0, msg=lambda m, t=t: f"step {t}: {m}")  # type: ignore[misc]


@pytest.mark.parametrize("cache", ["window(size=8, sinks=2, slack=4)", "h2o(budget=10, sinks=2, recent=3, slack=4)"])
@torch.no_grad()
def test_prefill_in_blocks_equals_the_cache_fed_so(cache: str) -> None:
    """The window attends a block query by query as single steps would; both serve a 2-layer Llama in blocks."""
    model = HFModel(llama(n_layers=2, context=32))
    ids = torch.randint(0, 96, (1, 60), generator=torch.Generator().manual_seed(2))
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=1)
    one = dk.create_cache(cache, spec)
    singles = torch.cat([model(ids[:, t : t + 1], torch.tensor([[t]]), one) for t in range(60)], 1)
    blocks = dk.create_cache(cache, spec)
    chunks = torch.cat([model(ids[:, a : a + 4], torch.arange(a, a + 4)[None], blocks) for a in range(0, 60, 4)], 1)
    if cache.startswith("window"):
        torch.testing.assert_close(chunks, singles, atol=1e-4, rtol=0)
    assert blocks.length == one.length == 60


class Recorder(PreallocatedKVCache):
    """Keeps every token and records the attention weights its observed queries give."""

    def __init__(self, spec: dk.CacheSpec) -> None:
        super().__init__(spec)
        self.weights: dict[int, torch.Tensor] = {}
        self.keys: dict[int, torch.Tensor] = {}

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer], values = super().update(layer, k, v)
        return self.keys[layer], values

    def observe(self, layer: int, queries: torch.Tensor) -> None:
        k = self.keys[layer].repeat_interleave(queries.shape[1] // self.keys[layer].shape[1], 1)
        scores = queries @ k.transpose(-1, -2) / queries.shape[-1] ** 0.5
        mask = self.attention_mask(layer, torch.arange(queries.shape[2])[None].expand(queries.shape[0], -1))
        self.weights[layer] = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)


@pytest.mark.parametrize("name", ["llama", "trained"])
@torch.no_grad()
def test_observed_queries_give_transformers_attention_weights(request: pytest.FixtureRequest, name: str) -> None:
    """What a cache computes from the queries it is handed equals transformers' eager attention weights."""
    hf = request.getfixturevalue(name)
    model = HFModel(hf)
    eager = copy.deepcopy(hf)
    eager.set_attn_implementation("eager")
    ids = torch.randint(0, 80, (2, 40), generator=torch.Generator().manual_seed(3))
    recorder = Recorder(dk.CacheSpec.for_model(model.spec, batch_size=2, capacity=40))
    logits = model(ids, torch.arange(40)[None].expand(2, -1), recorder)
    out = eager(ids, output_attentions=True)
    torch.testing.assert_close(logits, out.logits, atol=1e-4, rtol=0)
    for layer, want in enumerate(out.attentions):
        torch.testing.assert_close(recorder.weights[layer], want, atol=1e-5, rtol=0)


@torch.no_grad()
def test_calibration_measures_a_transformers_model() -> None:
    """The profile a(l, h, d) of a Llama, from its observed queries, equals the one from its eager weights."""
    hf = llama(n_layers=2, context=32)
    eager = copy.deepcopy(hf)
    eager.set_attn_implementation("eager")
    windows = torch.randint(0, 96, (3, 32), generator=torch.Generator().manual_seed(4))
    a, sink = attention_profile(HFModel(hf), windows, sinks=2)
    probs = torch.stack(eager(windows, output_attentions=True).attentions).double()  # [L, N, H, T, T]
    for d in (0, 1, 7, 29):
        want = probs.diagonal(offset=-d, dim1=-2, dim2=-1)[..., 2:].mean((1, 3))  # [L, H]
        torch.testing.assert_close(a[:, :, d], want, atol=1e-6, rtol=0)
    torch.testing.assert_close(sink, probs[:, :, :, 16:, :2].mean((1, 2, 3)), atol=1e-6, rtol=0)


def test_window_auto_reads_the_calibration_beside_the_weights(tmp_path: Path, char_tokenizer: Any) -> None:
    hf = llama(n_layers=2, context=32)
    hf.save_pretrained(tmp_path)
    char_tokenizer.save_pretrained(tmp_path)
    text = "".join(chr(32 + (i * 7) % 95) for i in range(400))
    result = calibrate(HFModel(hf), char_tokenizer.encode(text), sinks=2, text="synthetic")
    (tmp_path / "calibration.json").write_text(result.to_json(), encoding="utf-8")
    model = dk.load_model(f"hf:{tmp_path}")
    assert model.spec.calibration == tmp_path / "calibration.json"
    out = dk.generate(model, "To be", cache='window(size="auto", sinks=2)', max_new_tokens=80, seed=0)
    assert len(out.tokens[0]) == 80  # past the 32-position context
    (tmp_path / "calibration.json").write_text(json.dumps({"layers": "?"}), encoding="utf-8")
    model = dk.load_model(f"hf:{tmp_path}")
    assert len(dk.generate(model, "To be", cache="gqa", max_new_tokens=4).tokens[0]) == 4
    with pytest.raises(dk.ParameterError, match=r"calibration file .*calibration.json: "):
        dk.generate(model, "To be", cache='window(size="auto")', max_new_tokens=4)


def test_a_folder_without_a_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        dk.ParameterError, match=r"hf: .* has no config.json; allowed: a folder written by save_pretrained"
    ):
        dk.load_model(f"hf:{tmp_path}")


SCORED = ["h2o", "tova", "snapkv", "knorm", "streaming"]


@pytest.mark.parametrize("cache", [*SCORED, "window"])
@pytest.mark.parametrize("store", ["gqa", "int8"])
def test_the_trained_model_streams_past_its_context(trained: Any, cache: str, store: str) -> None:
    model = HFModel(trained)
    size = "size=64, sinks=4" if cache == "window" else "budget=64"
    out = dk.generate(
        model, [[60, 70, 65], [50, 55]], cache=f"{cache}({size}, store={store!r})", max_new_tokens=300, seed=0
    )
    assert [len(t) for t in out.tokens] == [300, 300]


@pytest.mark.parametrize("cache", SCORED)
def test_strategies_on_the_trained_model(trained: Any, cache: str) -> None:
    model = HFModel(trained)
    prompt = [[60, 61, 62, 63] * 6]
    want = dk.generate(model, prompt, chain="greedy", cache="gqa", max_new_tokens=20).tokens
    out: Any = dk.decode(
        model,
        prompt,
        strategy="speculative",
        draft="ngram",
        k=3,
        chain="greedy",
        cache=f"{cache}(budget=60)",
        max_new_tokens=20,
    )
    assert out.tokens == want and sum(out.drafted) > sum(out.accepted)
    beams = beam_search(model, prompt, num_beams=3, cache=f"{cache}(budget=60)", max_new_tokens=12).tokens
    assert beams == beam_search(model, prompt, num_beams=3, cache="gqa", max_new_tokens=12).tokens
    evicting = dk.decode(
        model,
        prompt,
        strategy="speculative",
        draft="ngram",
        k=3,
        chain="greedy",
        cache=f"{cache}(budget=16)",
        max_new_tokens=80,
    )
    assert len(evicting.tokens[0]) == 80


def test_another_rotary_layout_past_its_context_is_refused_naming_it(build_arch: Any) -> None:
    """Cohere rotates interleaved pairs, which decodekit.rope does not: the refusal said its positions were
    absolute (not rotary)."""
    model = HFModel(build_arch("cohere", num_hidden_layers=1, max_position_embeddings=32))
    with pytest.raises(dk.ContextLengthError) as info:
        dk.generate(model, [[1, 2, 3]], max_new_tokens=40, cache="window(size=8, sinks=2)")
    assert "and its rotary embedding (cohere's own layout) is not supported for re-rotating kept keys:" in str(
        info.value
    )


@pytest.mark.parametrize("chain", ["greedy", "top_k(20) | temperature(0.9)"])
def test_a_ragged_batch_through_window_decodes_each_row_as_alone(chain: str) -> None:
    """Before: a left-padded row's sinks were the batch's first slots, its padding, so once the window evicted its
    tokens differed from alone. Each row's own sinks now, moved by its own distance, through transformers' Llama."""
    model = HFModel(llama(n_layers=2, context=32))
    prompts = [[(3 * i) % 90 + 1 for i in range(19)], [(7 * i) % 90 + 2 for i in range(13)], [5, 6], [8, 9, 10, 11]]
    seeds = [3, 4, 5, 6]
    options: dict[str, Any] = {"cache": "window(size=6, sinks=2, slack=4)", "chain": chain, "logprobs": 0}
    out = dk.decode(model, prompts, max_new_tokens=30, seed=seeds, stop_tokens=[], **options)
    for b, prompt in enumerate(prompts):
        alone = dk.decode(model, [prompt], max_new_tokens=30, seed=[seeds[b]], stop_tokens=[], **options)
        assert out.tokens[b] == alone.tokens[0], f"row {b}"
        assert out.logprobs is not None and alone.logprobs is not None
        got, want = ([t.raw for t in x] for x in (out.logprobs[b], alone.logprobs[0]))
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=1e-4, rtol=0)

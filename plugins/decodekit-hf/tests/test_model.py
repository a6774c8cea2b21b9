"""`HFModel`: the spec from the config, logits equal transformers' own forward (padded, cached or not),
the cache bridge allocates nothing, the tokenizer and stop tokens."""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from decodekit_hf.cache_bridge import DecodekitCache
from decodekit_hf.model import HFModel, model_spec, rope_base

import decodekit as dk
from tinymodels import greedy_recomputed

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]


def test_a_transformers_model_passed_as_it_is_says_to_wrap_it(llama: Any) -> None:
    """Before: "model LlamaForCausalLM: no spec.vocab_size; allowed: a model with a decodekit.ModelSpec `spec`"."""
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(llama, [[1, 2, 3]], max_new_tokens=2)
    assert str(refused.value) == (
        "model LlamaForCausalLM: a transformers model, with no decodekit spec; allowed: a model with a "
        "decodekit.ModelSpec `spec`: decodekit_hf.model.HFModel(model, tokenizer) wraps it (docs/hf.md)"
    )
    assert dk.generate(HFModel(llama), [[1, 2, 3]], max_new_tokens=2).finish_reasons == ["length"]


def test_spec_from_gpt2_config(gpt2: Any) -> None:
    assert HFModel(gpt2).spec == dk.ModelSpec(
        n_layers=2, n_heads=4, n_kv_heads=4, head_dim=8, vocab_size=96, max_positions=128
    )


def test_spec_from_llama_config_has_kv_heads(llama: Any) -> None:
    assert HFModel(llama).spec == dk.ModelSpec(
        n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, vocab_size=96, max_positions=128, rope_base=10000.0
    )


def test_spec_of_the_trained_model(trained: Any) -> None:
    assert HFModel(trained).spec == dk.ModelSpec(
        n_layers=4, n_heads=8, n_kv_heads=2, head_dim=24, vocab_size=84, max_positions=256, rope_base=10000.0
    )


def test_rope_base_only_for_rotation_decodekit_can_continue() -> None:
    """Llama's default rotary base is read; scaled frequencies, partial rotation or another family give None."""
    from transformers import GPTNeoXConfig, LlamaConfig, Phi3Config

    base: dict[str, Any] = {"num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8, "vocab_size": 10}
    # transformers' hints leave out the legacy keywords its configs still take through **kwargs
    assert rope_base(LlamaConfig(**base, rope_theta=500.0)) == 500.0  # type: ignore[call-arg]
    scaled = LlamaConfig(**base, rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0})
    assert rope_base(scaled) is None
    assert rope_base(GPTNeoXConfig(**base)) is None  # partial rotary, another layout
    assert rope_base(Phi3Config(**base)) == 10000.0  # Llama's rotary embedding
    assert rope_base(Phi3Config(**base, partial_rotary_factor=0.75)) is None  # type: ignore[call-arg]  # Phi-4-mini's: a quarter unrotated


def test_spec_rejects_non_attention_layers() -> None:
    config = SimpleNamespace(
        num_hidden_layers=2,
        num_attention_heads=4,
        hidden_size=32,
        vocab_size=96,
        max_position_embeddings=64,
        layer_types=["full_attention", "linear_attention"],
    )
    with pytest.raises(dk.ParameterError, match="linear_attention"):
        model_spec(config)


@pytest.mark.parametrize(
    ("model_type", "config", "message"),
    [
        ("mamba", {}, r"MambaConfig is not served: it has no attention heads"),
        ("rwkv", {}, r"RwkvConfig is not served: it has no attention heads"),
        ("recurrent_gemma", {}, r"RecurrentGemmaConfig is not served: its 'recurrent' blocks"),
        ("deepseek_v32", {"kv_lora_rank": 16}, r"DeepseekV32Config is not served: its sparse-attention indexer"),
    ],
)
def test_spec_refuses_a_model_whose_state_decodekit_caches_cannot_hold(
    model_type: str, config: dict[str, Any], message: str
) -> None:
    """Mamba and RWKV were an AttributeError, RecurrentGemma blamed a missing context length, DeepSeek's latent
    attention a shape error in the cache (served since 2026-12-04, but for V3.2's indexer): each is now a
    ParameterError saying what is not served."""
    from transformers import AutoConfig

    base = {"num_hidden_layers": 4, "hidden_size": 32, "vocab_size": 96}
    with pytest.raises(dk.ParameterError, match=message + r".*allowed: "):
        model_spec(AutoConfig.for_model(model_type, **base, **config))


def _padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """decodekit's layout: left-padded ids, negative positions on padding; and transformers' 2-D mask."""
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p) :] = torch.tensor(p)
    pads = torch.tensor([width - len(p) for p in prompts])
    positions = torch.arange(width)[None] - pads[:, None]
    return ids, positions, (positions >= 0).long()


@pytest.mark.parametrize("cache", ["dense", "gqa"])
def test_cached_logits_equal_transformers_forward(hf_model: Any, cache: str) -> None:
    """Prefill a ragged batch, then 6 one-token steps; every real position's logits match one full forward."""
    model = HFModel(hf_model)
    extra = torch.tensor([[11, 12, 13, 14, 15, 16]] * 3)
    ids, positions, mask = _padded(PROMPTS)
    full_ids = torch.cat([ids, extra], 1)
    full_mask = torch.cat([mask, torch.ones_like(extra)], 1)
    with torch.no_grad():
        ref = hf_model(full_ids, attention_mask=full_mask, position_ids=(full_mask.cumsum(1) - 1).clamp(min=0)).logits
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=3, capacity=full_ids.shape[1]))
    steps = [model(ids, positions, kv)]
    P = ids.shape[1]
    for t in range(extra.shape[1]):
        pos = positions[:, -1:] + t + 1
        steps.append(model(full_ids[:, P + t : P + t + 1], pos, kv))
    got = torch.cat(steps, 1)
    real = full_mask.bool()
    torch.testing.assert_close(got[real], ref[real], atol=1e-5, rtol=1e-5)
    assert kv.length == full_ids.shape[1]


@pytest.mark.parametrize("cache", ["dense", None])
def test_last_only_returns_the_last_column(hf_model: Any, cache: str | None) -> None:
    """`last_only=True` (a prefill that reads only `[:, -1]`) gives `[B, 1, V]` equal to the full call's last column."""
    model = HFModel(hf_model)
    ids, positions, _ = _padded(PROMPTS)

    def kv() -> dk.KVCache | None:
        spec = dk.CacheSpec.for_model(model.spec, batch_size=3, capacity=16)
        return None if cache is None else dk.create_cache(cache, spec)

    last = model(ids, positions, kv(), last_only=True)
    assert last.shape == (3, 1, model.spec.vocab_size)
    torch.testing.assert_close(last, model(ids, positions, kv())[:, -1:], atol=1e-5, rtol=1e-5)


def test_uncached_logits_equal_transformers_forward(hf_model: Any) -> None:
    ids, positions, mask = _padded(PROMPTS)
    with torch.no_grad():
        ref = hf_model(ids, attention_mask=mask, position_ids=positions.clamp(min=0)).logits
    got = HFModel(hf_model)(ids, positions, None)
    real = mask.bool()
    torch.testing.assert_close(got[real], ref[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cache", ["dense", "gqa"])
@pytest.mark.parametrize("name", ["llama", "trained"])
def test_bridge_returns_views_of_the_decodekit_cache(request: pytest.FixtureRequest, name: str, cache: str) -> None:
    """transformers attends over the decodekit cache's own buffers (kv-heads only), and nbytes is the formula."""
    spec = HFModel(request.getfixturevalue(name)).spec
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(spec, batch_size=2, capacity=16))
    stored = spec.n_heads if cache == "dense" else spec.n_kv_heads
    assert kv.nbytes == 2 * spec.n_layers * 2 * 16 * stored * spec.head_dim * 4  # type: ignore[attr-defined]
    bridge = DecodekitCache(kv)
    k_new = torch.randn(2, spec.n_kv_heads, 3, spec.head_dim)
    v_new = torch.randn(2, spec.n_kv_heads, 3, spec.head_dim)
    for layer in range(spec.n_layers):
        assert bridge.get_mask_sizes(3, layer) == (3, 0)
        k, v = bridge.update(k_new, v_new, layer)
        assert k.shape == v.shape == (2, spec.n_kv_heads, 3, spec.head_dim)
        torch.testing.assert_close(k, k_new, rtol=0, atol=0)
        torch.testing.assert_close(v, v_new, rtol=0, atol=0)
        assert k.untyped_storage().data_ptr() == kv.store.keys[layer].untyped_storage().data_ptr()  # type: ignore[attr-defined]
    assert bridge.get_seq_length() == kv.length == 3
    assert bridge.get_mask_sizes(1, 0) == (4, 0)
    bridge.crop(-1)  # transformers 5.x: drop one token
    assert kv.length == 2
    bridge.crop(1)  # transformers 5.0: keep one token
    assert kv.length == 1
    bridge.reset()
    assert kv.length == 0


def test_tokenizer_text_and_stop_tokens(gpt2: Any, char_tokenizer: Any) -> None:
    model = HFModel(gpt2, char_tokenizer)
    assert model.stop_tokens == (95,)
    assert model.tokenizer is not None
    assert model.tokenizer.encode("Hi!") == [40, 73, 1]
    assert model.tokenizer.decode([40, 73, 1]) == "Hi!"
    out = dk.generate(model, "To be", chain="greedy", max_new_tokens=12, stop_tokens=model.stop_tokens)
    assert out.text is not None
    assert out.text[0] == model.tokenizer.decode([t for t in out.tokens[0] if t != 95])


@pytest.mark.parametrize("what", ["model", "tokenizer"])
@pytest.mark.parametrize("given", ["path", "class"])
def test_a_path_or_a_class_in_place_of_the_object_is_refused_at_construction(
    llama: Any, char_tokenizer: Any, what: str, given: str
) -> None:
    """pipeline() takes paths; HFModel(model, "/path") decoded until the first prompt, then raised str.encode's
    "LookupError: unknown encoding: <the prompt>" (and AutoTokenizer, the class, an AttributeError)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wrong = "/models/my-llama" if given == "path" else {"model": AutoModelForCausalLM, "tokenizer": AutoTokenizer}[what]
    args = {"model": llama, "tokenizer": char_tokenizer} | {what: wrong}
    with pytest.raises(dk.ParameterError, match=rf"^HFModel: {what}=.* is invalid; allowed: a .*\.from_pretrained\("):
        HFModel(args["model"], args["tokenizer"])


def test_a_processor_in_place_of_its_tokenizer_is_refused_at_construction(llama: Any, char_tokenizer: Any) -> None:
    """A multimodal model's AutoProcessor decodes but has no encode: HFModel(model, processor) was built, then the
    first prompt raised "AttributeError: ... has no attribute 'encode'"."""
    from transformers import ProcessorMixin

    class Processor(ProcessorMixin):  # type: ignore[misc]
        attributes: ClassVar[list[str]] = ["tokenizer"]
        tokenizer_class = "PreTrainedTokenizerFast"

    processor = Processor(char_tokenizer)  # type: ignore[no-untyped-call]
    assert not hasattr(processor, "encode") and callable(processor.decode)
    with pytest.raises(dk.ParameterError) as refused:
        HFModel(llama, processor)
    assert str(refused.value) == (
        "HFModel: tokenizer Processor has no encode; allowed: a tokenizer object (AutoModelForCausalLM and "
        "AutoTokenizer .from_pretrained(path), or dk.load_model('hf:PATH') for both); a processor (AutoProcessor) "
        "holds one: pass its .tokenizer"
    )
    assert dk.generate(HFModel(llama, processor.tokenizer), "ab", max_new_tokens=2).text


def test_stop_tokens_outside_the_vocabulary_are_dropped() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=40, n_positions=16))
    assert m.config.eos_token_id == 50256  # GPT-2's default, outside this vocabulary
    assert HFModel(m).stop_tokens == ()


@pytest.mark.parametrize("eos", [1.5, "3", [1.5], [3, "4"], True])
def test_an_eos_id_of_the_wrong_type_is_refused_naming_it(build_gpt2: Any, eos: Any) -> None:
    """From the generation-config fuzz (a generation_config.json written by hand): 1.5 failed the model's loading with
    "TypeError: 'float' object is not iterable", naming nothing; "3" and [1.5] became stop tokens 3 and 1."""
    hf = build_gpt2(seed=1)
    hf.generation_config.eos_token_id = eos
    named = f"the generation config's eos_token_id={eos!r} is invalid; allowed: a token id or a list of token ids"
    with pytest.raises(dk.ParameterError, match=re.escape(named)):
        HFModel(hf)


def _mistral(sliding_window: int) -> Any:
    """A 2-layer Mistral of the character vocabulary, seeded, with attention windows of `sliding_window` tokens."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=96,
        max_position_embeddings=128,
        sliding_window=sliding_window,
        initializer_range=0.2,
    )
    return MistralForCausalLM(config).eval()  # type: ignore[no-untyped-call]


def test_sliding_window_model_equals_transformers_recomputation() -> None:
    """Mistral with a 5-token window: decodekit keeps every key and transformers' mask applies the window.

    The reference is transformers' own forward over the whole sequence at every step (greedy):
    its `generate()` with its sliding-window cache was seen to drift from that recomputation.
    """
    mistral = _mistral(sliding_window=5)
    ids, _, mask = _padded(PROMPTS)
    expected = []
    with torch.no_grad():
        for _ in range(20):
            logits = mistral(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
            token = logits[:, -1].argmax(-1, keepdim=True)
            expected.append(token)
            ids, mask = torch.cat([ids, token], 1), torch.cat([mask, torch.ones_like(token)], 1)
    for cache in ("dense", "gqa", "none"):
        out = dk.generate(HFModel(mistral), PROMPTS, chain="greedy", max_new_tokens=20, cache=cache)
        assert out.tokens == torch.cat(expected, 1).tolist()


@pytest.mark.parametrize("name", ["llama", "trained"])
def test_int8_cache_logits_close_to_transformers_forward(request: pytest.FixtureRequest, name: str) -> None:
    """int8 keeps every token: transformers attends over its dequantised keys, close to float."""
    llama = request.getfixturevalue(name)
    model = HFModel(llama)
    ids, positions, mask = _padded(PROMPTS)
    with torch.no_grad():
        ref = llama(ids, attention_mask=mask, position_ids=positions.clamp(min=0)).logits
    kv = dk.create_cache("int8", dk.CacheSpec.for_model(model.spec, batch_size=3, capacity=ids.shape[1]))
    got = model(ids, positions, kv)
    real = positions >= 0
    assert (got - ref)[real].abs().max() < 0.03 * ref[real].abs().max()  # within 3% of the logit scale


def test_an_evicting_cache_is_refused_where_transformers_masks_a_sliding_window() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        hidden_size=16,
        intermediate_size=32,
        vocab_size=96,
        max_position_embeddings=64,
        sliding_window=5,
    )
    model = HFModel(MistralForCausalLM(config).eval())  # type: ignore[no-untyped-call]
    with pytest.raises(dk.ParameterError, match=r"sliding-window layers.*allowed: .*a cache that keeps every token"):
        dk.generate(model, [[1, 2, 3]], cache="window(size=8)", max_new_tokens=3)  # 6 tokens past a window of 5


def test_an_evicting_cache_serves_a_sliding_window_model_whose_window_covers_the_text() -> None:
    """Mistral's default sliding_window=4096 refused every evicting cache, though a model attends to the whole
    of a text no longer than its window: refused only where the text (prompt + max_new_tokens) can pass it."""
    mistral = _mistral(sliding_window=40)
    model = HFModel(mistral)
    prompt = PROMPTS[0]  # 10 tokens + 30 new: the whole window
    want = greedy_recomputed(mistral, prompt, 30)
    assert len(set(want)) > 3  # not one token repeated: the caches' agreement means something
    for cache in ("dense", "window(size=48, sinks=0)", "h2o(budget=48)"):
        assert dk.generate(model, [prompt], chain="greedy", max_new_tokens=30, cache=cache).tokens == [want]
    with pytest.raises(dk.ParameterError) as refused:
        dk.generate(model, [prompt], chain="greedy", max_new_tokens=31, cache="window(size=48)")
    assert "sliding-window layers (sliding_window=40) mask a text of 41 tokens" in str(refused.value)


def test_mpt_context_is_its_max_seq_len() -> None:
    """MPT keeps its context in `max_seq_len`, where HFModel did not look: it refused MPT outright."""
    from transformers import MptConfig, MptForCausalLM

    torch.manual_seed(1)  # weights whose greedy text varies (seed 0's repeats one token)
    config = MptConfig(
        n_layers=2, n_heads=4, d_model=32, expansion_ratio=2, vocab_size=96, max_seq_len=24, initializer_range=0.5
    )
    mpt = MptForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    model = HFModel(mpt)
    assert model.spec.max_positions == 24
    prompt = PROMPTS[0]
    want = greedy_recomputed(mpt, prompt, 14)
    assert len(set(want)) > 3
    assert dk.generate(model, [prompt], chain="greedy", max_new_tokens=14, cache="gqa").tokens == [want]
    with pytest.raises(dk.ContextLengthError, match="= 25 tokens exceeds the model's context of 24 positions"):
        dk.generate(model, [prompt], chain="greedy", max_new_tokens=15, cache="gqa")


def test_an_evicting_cache_is_refused_under_another_attention_implementation() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=1, num_attention_heads=2, hidden_size=16, intermediate_size=32, vocab_size=96
    )
    hf = LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]
    hf.set_attn_implementation("eager")
    model = HFModel(hf)
    assert dk.generate(model, [[1, 2, 3]], cache="gqa", max_new_tokens=2).tokens  # its own attention serves these
    with pytest.raises(dk.ParameterError, match=r"attn_implementation='eager'; allowed: a model loaded with"):
        dk.generate(model, [[1, 2, 3]], cache="window(size=8)", max_new_tokens=2)


def test_bridge_refuses_crop_and_reorder_on_a_cache_without_them_saying_what_is_allowed() -> None:
    """The errors said only "cache X cannot crop": they name the capability a cache must have."""
    bridge = DecodekitCache(dk.create_cache("dense", dk.CacheSpec(1, 1, 1, 2, 1, 4)))
    bridge.kv = SimpleNamespace(length=3)  # type: ignore[assignment]  # a cache with neither crop nor reorder
    with pytest.raises(dk.ParameterError) as info:
        bridge.crop(-1)
    assert str(info.value).startswith(  # then the installed backends with crop (tests/test_capability_words.py)
        "DecodekitCache.crop: cache SimpleNamespace cannot be used: DecodekitCache.crop needs a cache that takes "
        "back rejected tokens with crop(n); allowed: a cache backend with crop (installed: "
    )
    with pytest.raises(dk.ParameterError) as info:
        bridge.reorder_cache(torch.tensor([0]))
    assert str(info.value).startswith(
        "DecodekitCache.reorder_cache: cache SimpleNamespace cannot be used: DecodekitCache.reorder_cache needs a "
        "cache that moves its rows after the beams with reorder(index); allowed: a cache backend with reorder "
        "(installed: "
    )


def test_an_evicting_cache_is_refused_on_an_alibi_model() -> None:
    """Falcon with ALiBi adds its position biases to transformers' attention mask, which decodekit's attention
    function never reads: a window cache ran without them (wrong tokens, no error). The refusal names the cache as the
    user did (`window`; it said `WindowCache`, its class, where the core's refusals say the registered name)."""
    from transformers import FalconConfig, FalconForCausalLM

    config = FalconConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=16, vocab_size=96, alibi=True)
    model = HFModel(FalconForCausalLM(config).eval())  # type: ignore[no-untyped-call]
    assert dk.generate(model, [[1, 2, 3]], cache="gqa", max_new_tokens=2).tokens  # the mask carries the biases
    with pytest.raises(
        dk.ParameterError, match=r"cache window evicts .*ALiBi position biases.*allowed: a cache that keep"
    ):
        dk.generate(model, [[1, 2, 3]], cache="window(size=8)", max_new_tokens=2)


@pytest.mark.parametrize("cache", ["window(size=8)", "h2o(budget=12)"])
def test_an_evicting_cache_is_refused_where_a_layer_attends_by_its_own_code(llama: Any, cache: str) -> None:
    """A layer that does not call transformers' attention interface never reaches the cache's mask: the window
    attended past what it evicted, h2o failed with a PluginError about observe()."""
    hf = copy.deepcopy(llama)
    attention = hf.model.layers[1].self_attn
    model = HFModel(hf)
    attention.config = copy.copy(attention.config)
    attention.config._attn_implementation = "sdpa"  # this layer alone: transformers' own SDPA
    with pytest.raises(dk.ParameterError, match=r"layer 1 of LlamaForCausalLM attends by its own code.*allowed: "):
        dk.generate(model, [[1, 2, 3]], cache=cache, max_new_tokens=2)
    # a prompt given twice is prefilled once, through the engine's view of the cache: the refusal named the view
    # ('cache CopiesView evicts or observes attention'), not the cache as the user did
    name = cache.split("(")[0]
    with pytest.raises(dk.ParameterError, match=rf"^HFModel: cache {name} evicts or observes attention, and layer 1 "):
        dk.generate(model, [[1, 2, 3], [1, 2, 3]], cache=cache, max_new_tokens=2)


@torch.no_grad()
def test_gemma2_softcapped_logits_reach_the_chain(build_arch: Any) -> None:
    """Gemma 2 caps its final logits (`cap · tanh(logits / cap)`): greedy tokens cannot tell (tanh keeps the
    order), so the logits a chain sees, cached and with `last_only`, are compared with transformers' forward,
    and with the cap applied by hand to the projection's raw output."""
    hf = build_arch("gemma2", final_logit_softcapping=2.0)
    model = HFModel(hf)
    ids, positions, mask = _padded(PROMPTS)
    ref = hf(ids, attention_mask=mask, position_ids=positions.clamp(min=0)).logits
    raw = hf.lm_head(hf.model(ids, attention_mask=mask, position_ids=positions.clamp(min=0)).last_hidden_state)
    torch.testing.assert_close(ref, 2.0 * torch.tanh(raw / 2.0))
    assert raw.abs().max() > 2.0  # the cap changes these logits
    kv = dk.create_cache("gqa", dk.CacheSpec.for_model(model.spec, batch_size=3, capacity=ids.shape[1]))
    real = positions >= 0
    torch.testing.assert_close(model(ids, positions, kv)[real], ref[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(ids, positions, None, last_only=True), ref[:, -1:], atol=1e-5, rtol=1e-5)


def test_gemma3n_layers_that_share_keys_take_no_cache_and_decode_as_transformers(
    gen_config: Any, left_pad: Any
) -> None:
    """Gemma 3n's last `num_kv_shared_layers` layers attend over an earlier layer's keys and never write the cache:
    the decodekit cache had a layer for each, left empty, so its length (its last layer's) stayed 0 and the tokens
    were wrong. The cache now holds the layers that keep keys; the shared ones only answer transformers' mask
    sizes. Sliding layers with a 4-token window, shorter than the sequence; an evicting cache is refused (for the
    shared layers: test_newer_architectures.py)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "gemma3n_text",
        num_hidden_layers=4,
        num_kv_shared_layers=2,
        layer_types=["sliding_attention", "full_attention"] * 2,
        sliding_window=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        hidden_size=32,
        intermediate_size=64,
        hidden_size_per_layer_input=8,
        vocab_size=96,
        vocab_size_per_layer_input=96,
        max_position_embeddings=128,
        initializer_range=0.2,
        pad_token_id=0,
    )
    hf = AutoModelForCausalLM.from_config(config).eval()
    ids, mask = left_pad(PROMPTS)
    want = hf.generate(ids, attention_mask=mask, generation_config=gen_config(max_new_tokens=16))[:, ids.shape[1] :]
    model = HFModel(hf)
    for cache in ("dense", "gqa"):
        out = dk.generate(model, PROMPTS, chain="greedy", max_new_tokens=16, cache=cache)
        assert out.tokens == want.tolist()
    assert model.spec.n_layers == 2  # the layers that keep keys
    # refused for the shared layers first: the sliding layers' own window would be refused for them too
    with pytest.raises(dk.ParameterError, match=r"num_kv_shared_layers=2.*allowed: a cache that keeps every token"):
        dk.generate(model, PROMPTS, max_new_tokens=2, cache="window(size=8)")

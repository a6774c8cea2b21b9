"""The generation configs popular checkpoints ship, end to end: for each, a tiny random model of the checkpoint's
architecture and vocabulary size, saved with that `generation_config.json` (and its config's token ids) in the test's
tmp dir. `generation_chain` of the directory does what the `LogitsProcessorList` of transformers' own `generate()`
does to logits, and `decodekit generate --model hf:DIR` runs with it and stops at the config's EOS ids.

The configs are written from the checkpoints' hub files (their `transformers_version` fields left out)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from cli_runner import run_cli
from decodekit_cli.defaults import DEFAULT_CHAIN
from decodekit_hf import HFModel, generation_chain

import decodekit as dk

# checkpoint -> (model_type, vocab_size, its generation_config.json)
SHIPPED: dict[str, tuple[str, int, dict[str, Any]]] = {
    "meta-llama/Meta-Llama-3-8B-Instruct": (
        "llama",
        128256,
        {
            "bos_token_id": 128000,
            "eos_token_id": [128001, 128009],
            "do_sample": True,
            "temperature": 0.6,
            "max_length": 4096,
            "top_p": 0.9,
        },
    ),
    "meta-llama/Llama-3.1-8B-Instruct": (
        "llama",
        128256,
        {
            "bos_token_id": 128000,
            "do_sample": True,
            "eos_token_id": [128001, 128008, 128009],
            "temperature": 0.6,
            "top_p": 0.9,
        },
    ),
    "Qwen/Qwen2.5-7B-Instruct": (
        "qwen2",
        152064,
        {
            "bos_token_id": 151643,
            "pad_token_id": 151643,
            "do_sample": True,
            "eos_token_id": [151645, 151643],
            "repetition_penalty": 1.05,
            "temperature": 0.7,
            "top_p": 0.8,
            "top_k": 20,
        },
    ),
    "Qwen/Qwen3-8B": (
        "qwen3",
        151936,
        {
            "bos_token_id": 151643,
            "do_sample": True,
            "eos_token_id": [151645, 151643],
            "pad_token_id": 151643,
            "temperature": 0.6,
            "top_k": 20,
            "top_p": 0.95,
        },
    ),
    "google/gemma-2-9b-it": (
        "gemma2",
        256000,
        {
            "_from_model_config": True,
            "bos_token_id": 2,
            "cache_implementation": "hybrid",
            "eos_token_id": [1, 107],
            "pad_token_id": 0,
        },
    ),
    "google/gemma-3-1b-it": (
        "gemma3_text",
        262144,
        {
            "bos_token_id": 2,
            "cache_implementation": "hybrid",
            "do_sample": True,
            "eos_token_id": [1, 106],
            "pad_token_id": 0,
            "top_k": 64,
            "top_p": 0.95,
        },
    ),
    "mistralai/Mistral-7B-Instruct-v0.3": (
        "mistral",
        32768,
        {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2},
    ),
    "microsoft/Phi-3-mini-4k-instruct": (
        "phi3",
        32064,
        {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": [32000, 32001, 32007], "pad_token_id": 32000},
    ),
    "microsoft/phi-4": (
        "phi3",
        100352,
        {"_from_model_config": True, "bos_token_id": 100257, "eos_token_id": 100265, "pad_token_id": 100349},
    ),
    "openai-community/gpt2": (
        "gpt2",
        50257,
        {"_from_model_config": True, "bos_token_id": 50256, "eos_token_id": 50256},
    ),
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": (
        "llama",
        49152,
        {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2},
    ),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": (
        "qwen2",
        151936,
        {
            "_from_model_config": True,
            "bos_token_id": 151646,
            "eos_token_id": 151643,
            "do_sample": True,
            "temperature": 0.6,
            "top_p": 0.95,
        },
    ),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": (
        "llama",
        128256,
        {
            "_from_model_config": True,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
            "do_sample": True,
            "temperature": 0.6,
            "top_p": 0.95,
        },
    ),
    "allenai/OLMo-2-1124-7B-Instruct": (
        "olmo2",
        100352,
        {"bos_token_id": 100257, "eos_token_id": 100257, "pad_token_id": 100277},
    ),
}
# Each config's chain, as transformers' generate() applies it (an unset top_k is its default 50).
CHAINS = {
    "meta-llama/Meta-Llama-3-8B-Instruct": "temperature(0.6) | top_k(50) | top_p(0.9) | sample",
    "meta-llama/Llama-3.1-8B-Instruct": "temperature(0.6) | top_k(50) | top_p(0.9) | sample",
    "Qwen/Qwen2.5-7B-Instruct": "repetition_penalty(1.05) | temperature(0.7) | top_k(20) | top_p(0.8) | sample",
    "Qwen/Qwen3-8B": "temperature(0.6) | top_k(20) | top_p(0.95) | sample",
    "google/gemma-3-1b-it": "top_k(64) | top_p(0.95) | sample",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": "temperature(0.6) | top_k(50) | top_p(0.95) | sample",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": "temperature(0.6) | top_k(50) | top_p(0.95) | sample",
}
# The small sizes every tiny model here shares: vocabularies of 30k-260k rows stay a few megabytes.
TINY: dict[str, Any] = dict(
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    hidden_size=16,
    head_dim=8,
    intermediate_size=32,
    max_position_embeddings=64,
    initializer_range=0.2,
)
# Gemma 2's tied output rows share the embeddings' large vector: its logit soft-cap would squash every logit alike.
ARCH: dict[str, dict[str, Any]] = {
    "gemma2": dict(sliding_window=4, query_pre_attn_scalar=8, final_logit_softcapping=None),
    "gemma3_text": dict(sliding_window=4),
}
GPT2: dict[str, Any] = dict(n_layer=2, n_head=2, hidden_size=16, n_positions=64, initializer_range=0.2)
PROMPT = [5, 17, 3, 9, 44, 2]  # ids the character tokenizer has, too
NAMES = sorted(SHIPPED)


def eos_ids(name: str) -> list[int]:
    eos = SHIPPED[name][2]["eos_token_id"]
    return [eos] if isinstance(eos, int) else eos


def tiny_model(name: str) -> Any:
    """A random model of the checkpoint's type and vocabulary whose last EOS id is the likeliest token everywhere, so
    that a sample soon meets it: every input embedding shares one large vector, which then dominates each final
    hidden state, and the EOS row of the output points along their mean."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    model_type, vocab, generation = SHIPPED[name]
    ids = {key: generation[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if key in generation}
    sizes = GPT2 if model_type == "gpt2" else TINY | ARCH.get(model_type, {})
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=vocab, **sizes, **ids)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight += 20 * torch.nn.functional.normalize(torch.randn(1, sizes["hidden_size"]))
        hidden = model.base_model(torch.tensor([PROMPT])).last_hidden_state[0]
        direction = torch.nn.functional.normalize(hidden, dim=-1).mean(0)
        model.get_output_embeddings().weight[eos_ids(name)[-1]] = 40 * direction / direction.norm()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # _from_model_config and the like, as the hub's files carry them
        model.generation_config = GenerationConfig.from_dict(generation)
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, char_tokenizer: Any) -> Callable[[str], Path]:
    """`checkpoints(name)`: the directory of the checkpoint's tiny model, its generation_config.json as shipped."""
    made: dict[str, Path] = {}

    def checkpoint(name: str) -> Path:
        if name not in made:
            path = tmp_path_factory.mktemp(name.replace("/", "--"))
            tiny_model(name).save_pretrained(path)
            char_tokenizer.save_pretrained(path)
            (path / "generation_config.json").write_text(json.dumps(SHIPPED[name][2]))
            made[name] = path
        return made[name]

    return checkpoint


def hf_processors(model: Any, prompt: list[int]) -> Any:
    """The `LogitsProcessorList` that `generate()` builds for `model` (its own generation config) and `prompt`."""
    captured: list[Any] = []
    original = model._get_logits_processor

    def spy(*args: Any, **kwargs: Any) -> Any:
        captured.append(original(*args, **kwargs))
        return captured[-1]

    tokens = torch.tensor([prompt])
    with mock.patch.object(model, "_get_logits_processor", spy), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.generate(tokens, attention_mask=torch.ones_like(tokens), max_new_tokens=1)
    return captured[0]


@pytest.mark.parametrize("name", NAMES)
def test_the_shipped_config_gives_the_chain_generate_applies(checkpoints: Callable[[str], Path], name: str) -> None:
    from transformers import AutoModelForCausalLM

    path = checkpoints(name)
    text = generation_chain(path, prompt_length=len(PROMPT))
    assert text == CHAINS.get(name, "greedy")
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).eval()
    assert generation_chain(model) == generation_chain(HFModel(model)) == text
    processors = hf_processors(model, PROMPT)
    chain = dk.Chain.parse(text)
    vocab, eos = SHIPPED[name][1], eos_ids(name)
    g = torch.Generator().manual_seed(0)
    for step in (0, 1, 3):
        alphabet = torch.tensor([*PROMPT, *eos])  # histories that repeat, so a penalty meets its tokens
        tokens = alphabet[torch.randint(len(alphabet), (4, len(PROMPT) + step), generator=g)]
        logits = torch.randn(4, vocab, generator=g) * 3
        ours = chain.process(logits, dk.DecodeContext(tokens=tokens, step=step))
        theirs = processors(tokens, logits.clone())
        removed = torch.isneginf(theirs)
        assert torch.equal(torch.isneginf(ours), removed)
        torch.testing.assert_close(ours[~removed], theirs[~removed], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_decodekit_generate_runs_the_checkpoint_and_stops_at_its_eos(
    checkpoints: Callable[[str], Path], name: str
) -> None:
    path = checkpoints(name)
    args = ["generate", "Hi", "--model", f"hf:{path}", "--max-new-tokens", "12", "--seed", "0", "--json"]
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    own = CHAINS.get(name)  # a config that sets no sampling option leaves decodekit's default chain
    assert report["chain"] == str(dk.Chain.parse(own or DEFAULT_CHAIN))
    assert ("model's own chain" in result.stderr) == (own is not None)
    [sample] = report["samples"]
    assert sample["finish_reason"] == "stop" and sample["tokens"][-1] == eos_ids(name)[-1], sample

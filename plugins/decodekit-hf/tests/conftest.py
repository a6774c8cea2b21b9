"""Fixtures: tiny random-init transformers models (GPT-2, and a Llama with 4 heads sharing 2 kv-heads),
a character tokenizer, a neutral generation config and left-padded batches for `model.generate`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from tinymodels import greedy_generation_config, left_padded

VOCAB = 96  # the character tokenizer's 95 printable ASCII characters and <eos>
# Weights ten times GPT-2's usual 0.02: logits with a spread of a few units, so temperatures and
# penalties change the outcome and no two tokens are near a tie.
INIT = 0.2
PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [83, 1, 33, 33, 12]]  # ids below every model's vocabulary

LeftPad = Callable[[Sequence[Sequence[int]]], tuple[torch.Tensor, torch.Tensor]]
GenConfig = Callable[..., GenerationConfig]


def make_gpt2(seed: int = 0, **overrides: Any) -> Any:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=32,
        vocab_size=VOCAB,
        n_positions=128,
        bos_token_id=VOCAB - 1,
        eos_token_id=VOCAB - 1,
        initializer_range=INIT,
        **overrides,
    )
    return GPT2LMHeadModel(config).eval()  # type: ignore[no-untyped-call]


# What every tiny random model here shares (a multi-head model sets its own heads).
_TINY: dict[str, Any] = dict(
    num_hidden_layers=2,
    num_attention_heads=4,
    hidden_size=32,
    intermediate_size=64,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    bos_token_id=VOCAB - 1,
    eos_token_id=VOCAB - 1,
    pad_token_id=VOCAB - 1,  # some configs default to an id past this vocabulary
    initializer_range=INIT,
)
_GQA = dict(num_key_value_heads=2)


def make_llama(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    config = LlamaConfig(**(_TINY | _GQA | dict(pad_token_id=None)))  # no padding row: the weights drawn as ever
    return LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]


# Architectures beyond GPT-2 and Llama, each a tiny random model built from its config: model_type -> the config
# fields it needs besides `_TINY` (GPT-J needs a rotary dimension that fits).
ARCHS: dict[str, dict[str, Any]] = {
    "qwen2": _GQA,
    "qwen3": _GQA | dict(head_dim=8),
    "gemma": _GQA | dict(head_dim=8),
    "gemma2": _GQA | dict(head_dim=8, sliding_window=4, query_pre_attn_scalar=8),  # softcapping on; sliding layers
    "gemma3_text": _GQA | dict(head_dim=8, sliding_window=4, query_pre_attn_scalar=8),
    "phi3": _GQA,
    "mixtral": _GQA | dict(num_local_experts=4, num_experts_per_tok=2),
    "olmo2": _GQA,
    "starcoder2": _GQA,
    "cohere": _GQA,  # rotary embedding interleaved, not rotate-half
    "stablelm": _GQA,  # its decoder layers drop the keywords they are given before they call attention
    "nemotron": _GQA,
    "falcon": dict(new_decoder_architecture=True, num_kv_heads=2),
    "gpt_neox": {},
    "opt": dict(ffn_dim=64, word_embed_proj_dim=32),
    "gptj": dict(rotary_dim=4),
}


def make_arch(model_type: str, seed: int = 0, **overrides: Any) -> Any:
    """The tiny random model of `ARCHS[model_type]` (another model type: `_TINY` and `overrides` alone)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **(_TINY | ARCHS.get(model_type, {}) | overrides))
    model = AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.eos_token_id = None  # generate() runs the full length, as dk.generate without stop_tokens
    return model


@pytest.fixture(scope="session")
def build_arch() -> Callable[..., Any]:
    """`make_arch(model_type, **config_overrides)`, for a test that needs another size of an architecture."""
    return make_arch


@pytest.fixture(scope="session")
def build_gpt2() -> Callable[..., Any]:
    """`make_gpt2(seed, **config_overrides)`, for a test that needs other weights."""
    return make_gpt2


@pytest.fixture(scope="session", params=sorted(ARCHS))
def arch_model(request: pytest.FixtureRequest) -> tuple[str, Any]:
    """(model_type, model): each architecture of `ARCHS`."""
    return request.param, make_arch(request.param)


@pytest.fixture(scope="session")
def gpt2() -> Any:
    return make_gpt2()


@pytest.fixture(scope="session")
def llama() -> Any:
    return make_llama()


def load_trained() -> Any:
    """`tiny-shakespeare-llama` (decodekit-shakespeare-llama): a trained Llama, 8 heads / 2 kv-heads, 84 characters."""
    llama = pytest.importorskip("decodekit_shakespeare_llama", reason="the trained Llama plugin is not installed")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(llama.model_dir()), local_files_only=True).eval()


@pytest.fixture(scope="session")
def trained() -> Any:
    return load_trained()


@pytest.fixture(scope="session", params=["gpt2", "llama", "trained"])
def hf_model(request: pytest.FixtureRequest) -> Any:
    """Each architecture: GPT-2 (multi-head) and Llama (grouped-query, 4 heads / 2 kv-heads) at random, and the
    trained `tiny-shakespeare-llama`."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def char_tokenizer() -> Any:
    """Printable ASCII, one id per character (' ' is 0), plus <eos> = 95."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(i): i - 32 for i in range(32, 127)} | {"<eos>": VOCAB - 1}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", pad_token="<eos>")  # type: ignore[no-untyped-call]


@pytest.fixture(scope="session")
def gen_config() -> GenConfig:
    """`tinymodels.greedy_generation_config`: greedy, no EOS stop, no minimum length, no processors."""
    return greedy_generation_config


@pytest.fixture(scope="session")
def left_pad() -> LeftPad:
    """`(input_ids, attention_mask)` for `model.generate`: rows left-padded with id 0 and masked."""
    return left_padded


def greedy_per_batch(model: Any, batches: dict[str, list[list[int]]], new: int) -> dict[str, list[list[int]]]:
    """transformers' greedy tokens, `new` per row, for each named batch left-padded (`generate(do_sample=False)`)."""
    greedy = {}
    for name, prompts in batches.items():
        ids, mask = left_padded(prompts)
        out = model.generate(ids, attention_mask=mask, generation_config=greedy_generation_config(max_new_tokens=new))
        greedy[name] = out[:, ids.shape[1] :].tolist()
    return greedy


@pytest.fixture(scope="session")
def hf_greedy() -> Callable[..., dict[str, list[list[int]]]]:
    """`greedy_per_batch(model, batches, new)`."""
    return greedy_per_batch


@pytest.fixture
def saved_gpt2(tmp_path: Path, gpt2: Any, char_tokenizer: Any) -> Path:
    """A local checkpoint directory: the GPT-2 fixture and the character tokenizer."""
    gpt2.save_pretrained(tmp_path)
    char_tokenizer.save_pretrained(tmp_path)
    return tmp_path

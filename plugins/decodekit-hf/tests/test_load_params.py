"""`hf(dtype=..., device=..., context=...):/path`: the `hf` loader's parameters, from Python and the command line,
checked against transformers' own loading and greedy `generate()`; Bloom (no context length in its config)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_hf.params import HFParams
from transformers import BloomConfig, BloomForCausalLM

import decodekit as dk

PROMPT = [5, 17, 3, 9, 44, 2, 8, 8, 9, 60]
RAGGED = [PROMPT, [7, 8], [83, 1, 33, 33, 12]]


def _greedy(model: Any, prompt: list[int], new: int, gen_config: Any) -> list[int]:
    """transformers' own greedy decode of `prompt`: the `new` tokens after it."""
    out = model.generate(torch.tensor([prompt]), generation_config=gen_config(max_new_tokens=new))
    return list(out[0, len(prompt) :].tolist())


def _dtypes(model: Any) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters()}


def test_hf_declares_its_parameters() -> None:
    """Registered with its model, so `decodekit plugins`, `samplers` and the errors know them."""
    assert dk.get_registry().models["hf"].params_model is HFParams
    assert list(HFParams.model_fields) == ["dtype", "device", "context"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_each_dtype_loads_the_weights_in_it(saved_gpt2: Path, dtype: str) -> None:
    model = dk.load_model(f"hf(dtype={dtype}):{saved_gpt2}")
    assert _dtypes(model) == {getattr(torch, dtype)}
    logits = model(torch.tensor([PROMPT]), torch.arange(len(PROMPT))[None], None)
    assert logits.dtype == getattr(torch, dtype)  # the forward runs in it, not cast back to float32


def test_float32_greedy_equals_transformers_generate(saved_gpt2: Path, gpt2: Any, gen_config: Any) -> None:
    model = dk.load_model(f"hf(dtype=float32):{saved_gpt2}")
    out = dk.generate(model, [PROMPT], chain="greedy", max_new_tokens=24, cache="gqa")
    assert out.tokens[0] == _greedy(gpt2, PROMPT, 24, gen_config)


def test_dtype_auto_is_the_checkpoints_as_transformers_5_loads_it(tmp_path: Path, gpt2: Any) -> None:
    """transformers 5's `from_pretrained` default is dtype="auto" (the config's `dtype`); 4.x loaded float32."""
    import copy

    copy.deepcopy(gpt2).to(torch.bfloat16).save_pretrained(tmp_path)
    assert _dtypes(dk.load_model(f"hf:{tmp_path}")) == {torch.bfloat16}
    assert _dtypes(dk.load_model(f"hf(dtype=auto):{tmp_path}")) == {torch.bfloat16}
    assert _dtypes(dk.load_model(f"hf(dtype=float32):{tmp_path}")) == {torch.float32}
    assert _dtypes(dk.load_model(f"hf:{tmp_path}", dtype="float16")) == {torch.float16}  # the keyword form


def test_device_cpu_places_the_weights_there(saved_gpt2: Path) -> None:
    model = dk.load_model(f"hf(device=cpu):{saved_gpt2}")
    assert {p.device.type for p in model.parameters()} == {"cpu"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: cuda is not refused")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_device_torch_cannot_use_is_refused_saying_what_is(saved_gpt2: Path, device: str) -> None:
    with pytest.raises(dk.ParameterError, match=rf"device='{device}' is not available here.*allowed: cpu"):
        dk.load_model(f"hf(device='{device}'):{saved_gpt2}")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("dtype=float64", r"dtype='float64' is invalid.*allowed: 'auto', 'float32', 'bfloat16' or 'float16'"),
        ("device=gpu", r"device='gpu' is invalid.*allowed: cpu, cuda, cuda:N \(N = 0, 1, \.\.\.\), mps"),
        ("device='cuda:x'", r"device='cuda:x' is invalid.*allowed: cpu, cuda, cuda:N"),
        ("context=0", r"context=0 is invalid.*allowed: an integer 1 <= context, or None"),
        ("context=2.5", r"context=2.5 is invalid.*allowed: an integer 1 <= context, or None"),
        (
            "context=129",
            r"context=129 is more than GPT2Config's max_position_embeddings=128; allowed: 1 <= context <= 128",
        ),
        ("layers=3", r"unknown parameter layers=3; allowed parameters: dtype, device, context"),
    ],
)
def test_bad_values_name_the_parameter_the_value_and_what_is_allowed(
    saved_gpt2: Path, params: str, message: str
) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.load_model(f"hf({params}):{saved_gpt2}")


def test_a_smaller_context_is_the_models(saved_gpt2: Path) -> None:
    model = dk.load_model(f"hf(context=12):{saved_gpt2}")
    assert model.spec.max_positions == 12
    with pytest.raises(dk.ContextLengthError):
        dk.generate(model, [PROMPT], chain="greedy", max_new_tokens=3)  # 10 + 3 > 12


@pytest.mark.parametrize("context", [0, True, 12.5, "12"])
def test_hfmodel_refuses_a_context_that_is_no_positive_int(gpt2: Any, context: Any) -> None:
    """`HFModel(model, context=...)` from Python skips HFParams: 12.5 became 12 and True 1 silently, "12" was a
    TypeError, 0 an error naming ModelSpec's max_positions, a name the caller never wrote."""
    from decodekit_hf.model import HFModel

    with pytest.raises(dk.ParameterError, match=rf"HFModel: context={context!r} is invalid; allowed: None or an int"):
        HFModel(gpt2, context=context)


def _bloom(seed: int = 0) -> Any:
    """A tiny random Bloom: ALiBi positions, and no context length in its config."""
    torch.manual_seed(seed)
    config = BloomConfig(
        n_layer=2, n_head=4, hidden_size=32, vocab_size=96, initializer_range=0.2, pad_token_id=95, eos_token_id=None
    )
    return BloomForCausalLM(config).eval()


@pytest.fixture
def saved_bloom(tmp_path: Path) -> tuple[Path, Any]:
    model = _bloom()
    model.save_pretrained(tmp_path)
    return tmp_path, model


def test_bloom_without_a_context_is_refused_naming_the_parameter(saved_bloom: tuple[Path, Any]) -> None:
    with pytest.raises(dk.ParameterError, match=r"BloomConfig has none of .*hf\(context=N\)"):
        dk.load_model(f"hf:{saved_bloom[0]}")


@pytest.mark.parametrize("cache", ["gqa", "dense", "none"])
def test_bloom_with_a_context_equals_transformers_greedy(
    saved_bloom: tuple[Path, Any], gen_config: Any, cache: str
) -> None:
    path, bloom = saved_bloom
    model = dk.load_model(f"hf(context=64):{path}")
    assert model.spec.max_positions == 64
    out = dk.generate(model, RAGGED, chain="greedy", max_new_tokens=54, cache=cache)  # the longest row fills 64
    assert out.tokens == [_greedy(bloom, p, 54, gen_config) for p in RAGGED]


def test_command_line_takes_the_parameters(saved_gpt2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--model 'hf(dtype=bfloat16):DIR'`: the tokens of the library's bfloat16 model, the model recorded as given."""
    from decodekit_cli import main

    name = f"hf(dtype=bfloat16):{saved_gpt2}"
    cmd = ["generate", "Hi", "--model", name, "--chain", "greedy", "--max-new-tokens", "6", "--json"]
    assert main(cmd) == 0
    report = json.loads(capsys.readouterr().out)
    expected = dk.generate(dk.load_model(name), ["Hi"], chain="greedy", max_new_tokens=6)
    assert report["samples"][0]["tokens"] == expected.tokens[0]
    assert report["model"] == name


def test_command_line_refuses_a_bad_value_in_one_line(saved_gpt2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from decodekit_cli import main

    assert main(["generate", "Hi", "--model", f"hf(dtype=int8):{saved_gpt2}", "--max-new-tokens", "2"]) != 0
    err = capsys.readouterr().err
    assert "dtype='int8' is invalid" in err and "Traceback" not in err


def test_bloom_refuses_an_evicting_cache(saved_bloom: tuple[Path, Any]) -> None:
    """Bloom runs eager attention (its ALiBi biases in its own code): a cache that evicts is refused, not served."""
    model = dk.load_model(f"hf(context=64):{saved_bloom[0]}")
    with pytest.raises(dk.ParameterError, match="attn_implementation='eager'") as refused:
        dk.generate(model, [PROMPT], chain="greedy", max_new_tokens=4, cache="window(size=8)")
    # What works for Bloom: it has no sdpa attention to load with (transformers refuses attn_implementation='sdpa').
    assert "'sdpa'" not in str(refused.value) and "allowed: a cache that keeps every token (dense, gqa, int8)" in str(
        refused.value
    )
    with pytest.raises(ValueError, match="does not support an attention implementation through .*scaled_dot_product"):
        BloomForCausalLM.from_pretrained(saved_bloom[0], attn_implementation="sdpa")


def test_batch_job_takes_the_parameters(saved_gpt2: Path, tmp_path: Path) -> None:
    """`generate --input --output --model 'hf(dtype=float16):DIR'`: the batch job loads the same string."""
    from decodekit_cli import main

    name = f"hf(dtype=float16):{saved_gpt2}"
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "out.jsonl"
    prompts.write_text('{"prompt": "Hi"}\n{"prompt": "Hello"}\n')
    cmd = ["generate", "--input", str(prompts), "--output", str(out), "--model", name, "--chain", "greedy"]
    assert main([*cmd, "--max-new-tokens", "5"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    expected = dk.generate(dk.load_model(name), ["Hi", "Hello"], chain="greedy", max_new_tokens=5)
    assert [r["tokens"] for r in records] == expected.tokens

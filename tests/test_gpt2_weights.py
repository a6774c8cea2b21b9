"""`load_gpt2`: the reference GPT with GPT-2 weights gives transformers' logits and greedy tokens.

Checked against transformers' `GPT2LMHeadModel` (random init, small config): logits within
float32 tolerance (plain and left-padded), greedy tokens equal to `generate(do_sample=False)`;
loading from a directory reads safetensors without importing transformers.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_gpt.gpt import GPT
from decodekit_gpt.gpt2_weights import load_gpt2

import decodekit as dk
from decodekit.errors import ParameterError
from tinymodels import greedy_generation_config, left_padded

transformers = pytest.importorskip("transformers")

PROMPTS = [[5, 17, 3, 9, 44, 2, 8, 8, 9, 60], [7, 8], [90, 1, 33, 33, 12]]


@pytest.fixture(scope="module")
def hf_gpt2() -> Any:
    """GPT-2 with a non-default LayerNorm epsilon, and weights large enough for sharp logits."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=3,
        n_head=4,
        n_embd=32,
        vocab_size=101,
        n_positions=96,
        layer_norm_epsilon=1e-3,
        initializer_range=0.2,
        bos_token_id=100,
        eos_token_id=100,
    )
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def saved(hf_gpt2: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpt2")
    hf_gpt2.save_pretrained(path)
    return path


def _hf_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits: torch.Tensor = model(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    return logits


@pytest.mark.parametrize("source", ["directory", "model"])
def test_logits_equal_transformers(hf_gpt2: Any, saved: Path, source: str) -> None:
    gpt = load_gpt2(saved if source == "directory" else hf_gpt2)
    assert isinstance(gpt, GPT) and not gpt.training
    assert gpt.config.layer_norm_epsilon == 1e-3 and gpt.lm_head.weight is gpt.wte.weight
    ids = torch.randint(0, 101, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = gpt(ids, torch.arange(30)[None].expand(2, -1), None)
    torch.testing.assert_close(ours, _hf_logits(hf_gpt2, ids, torch.ones_like(ids)), atol=1e-4, rtol=1e-4)


def test_left_padded_logits_equal_transformers(hf_gpt2: Any, saved: Path) -> None:
    gpt = load_gpt2(saved)
    width = max(map(len, PROMPTS))
    ids = torch.zeros(3, width, dtype=torch.long)
    for b, p in enumerate(PROMPTS):
        ids[b, width - len(p) :] = torch.tensor(p)
    positions = torch.arange(width)[None] - torch.tensor([width - len(p) for p in PROMPTS])[:, None]
    mask = (positions >= 0).long()
    with torch.no_grad():
        ours = gpt(ids, positions, None)
    real = mask.bool()
    torch.testing.assert_close(ours[real], _hf_logits(hf_gpt2, ids, mask)[real], atol=1e-4, rtol=1e-4)


def _argmax(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
    return logits.argmax(-1)  # greedy, written inline so core tests need no plugin


@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS], ids=["single", "ragged"])
def test_greedy_tokens_equal_transformers(hf_gpt2: Any, saved: Path, prompts: list[list[int]]) -> None:
    ids, mask = left_padded(prompts)
    width = ids.shape[1]
    config = greedy_generation_config(max_new_tokens=48)
    theirs = hf_gpt2.generate(ids, attention_mask=mask, generation_config=config)[:, width:].tolist()
    chain = dk.Chain([], selector=_argmax)
    for cache in ("dense", "none"):
        assert dk.generate(load_gpt2(saved), prompts, chain=chain, max_new_tokens=48, cache=cache).tokens == theirs


def test_directory_loading_imports_no_transformers(saved: Path) -> None:
    code = (
        "import sys\n"
        "from decodekit_gpt.gpt2_weights import load_gpt2\n"
        f"load_gpt2({str(saved)!r})\n"
        "assert 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sharded_and_half_precision_checkpoints(hf_gpt2: Any, tmp_path: Path) -> None:
    # A copy: `.half().float()` of the module's model rounded its weights, and a test after this one compared them
    # with the checkpoint saved before (pytest-randomly's order met it).
    copy.deepcopy(hf_gpt2).half().save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    gpt = load_gpt2(tmp_path)
    assert gpt.wte.weight.dtype == torch.float32
    torch.testing.assert_close(gpt.wte.weight, hf_gpt2.transformer.wte.weight.half().float())


def _edit_config(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changes))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"activation_function": "relu"}, "activation_function='relu'"),
        ({"n_inner": 64}, "n_inner=64"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
        ({"model_type": "llama"}, "model_type='llama'"),
        ({"n_layer": 4}, "lacks transformer.h.3"),
        ({"n_embd": 48}, "has shape"),
    ],
)
def test_unsupported_or_mismatched_checkpoints_are_errors(
    hf_gpt2: Any, tmp_path: Path, change: dict[str, object], message: str
) -> None:
    hf_gpt2.save_pretrained(tmp_path)
    _edit_config(tmp_path, **change)
    with pytest.raises(ParameterError, match=message):
        load_gpt2(tmp_path)


def test_missing_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="not a directory"):
        load_gpt2(tmp_path / "nowhere")
    with pytest.raises(ParameterError, match="no config.json"):
        load_gpt2(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ParameterError, match="no model.safetensors"):
        load_gpt2(tmp_path)

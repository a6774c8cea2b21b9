"""The entry point registers `tiny-shakespeare-llama` by import path, importing neither torch nor transformers;
the loader also takes another exported folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from decodekit_hf import HFModel
from transformers import LlamaConfig, LlamaForCausalLM

import decodekit as dk

_HOOK = """
import json, sys
from decodekit_shakespeare_llama import plugin, model_dir
calls = []
plugin.register_models(lambda name, impl, params=None, description="": calls.append([name, impl]))
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"calls": calls, "heavy": heavy, "dir": str(model_dir())}))
"""


def test_hook_registers_by_import_path_without_torch() -> None:
    run = subprocess.run([sys.executable, "-c", _HOOK], capture_output=True, text=True, check=True)
    report = json.loads(run.stdout)
    assert report["calls"] == [
        ["tiny-shakespeare-llama", "decodekit_shakespeare_llama.model:load_tiny_shakespeare_llama"]
    ]
    assert report["heavy"] == []
    assert (Path(report["dir"]) / "model.safetensors").is_file()


def test_loader_takes_another_folder(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        hidden_size=16,
        intermediate_size=32,
        vocab_size=84,
        max_position_embeddings=64,
    )
    LlamaForCausalLM(config).save_pretrained(str(tmp_path))
    model = dk.load_model(f"tiny-shakespeare-llama:{tmp_path}")
    assert isinstance(model, HFModel) and model.spec.n_layers == 1 and model.tokenizer is None


def test_loading_draws_no_progress_bar_where_stderr_is_no_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    # transformers drew "Loading weights: 100%|...| 38/38" on stderr, which the CLI keeps quiet when piped.
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    dk.load_model("tiny-shakespeare-llama")
    assert capfd.readouterr().err == ""
    assert hf_logging.is_progress_bar_enabled()  # only our load is quiet: the caller's setting is put back

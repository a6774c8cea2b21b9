"""The `hf` model loader: registration, `dk.load_model("hf:/path")`, errors, and a light entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_hf import HFModel

import decodekit as dk


def test_hf_is_registered_by_decodekit_hf() -> None:
    entry = dk.get_registry().models["hf"]
    assert entry.distribution == "decodekit-hf"
    assert entry.impl == "decodekit_hf.model:load_hf"


def test_load_model_reads_a_local_checkpoint_with_its_tokenizer(saved_gpt2: Path, gpt2: Any) -> None:
    model = dk.load_model(f"hf:{saved_gpt2}")
    assert isinstance(model, HFModel)
    assert model.tokenizer is not None and model.stop_tokens == (95,)
    ids = torch.tensor([[40, 73, 1, 0, 5]])
    torch.testing.assert_close(model(ids, torch.arange(5)[None], None), gpt2(ids).logits.detach())
    out = dk.generate(model, ["Hi", "Hello"], chain="greedy", max_new_tokens=5)
    assert out.text is not None and len(out.text) == 2


def test_load_model_without_tokenizer_files(tmp_path: Path, gpt2: Any) -> None:
    gpt2.save_pretrained(tmp_path)
    model = dk.load_model(f"hf:{tmp_path}")
    assert model.tokenizer is None


@pytest.mark.parametrize(("name", "message"), [("hf", "no checkpoint path"), ("hf:/no/such/dir", "not a directory")])
def test_load_model_errors_name_the_problem(name: str, message: str) -> None:
    with pytest.raises(dk.ParameterError, match=message):
        dk.load_model(name)


def test_entry_point_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, decodekit_hf.plugin\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_command_line_generates_from_a_local_checkpoint(
    saved_gpt2: Path, gpt2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`decodekit generate --model hf:/path`: the CLI loads it and gives the library's greedy text."""
    import json

    from decodekit_cli import main

    cmd = ["generate", "Hi", "--model", f"hf:{saved_gpt2}"]
    cmd += ["--chain", "greedy", "--max-new-tokens", "6", "--cache", "gqa", "--json"]
    assert main(cmd) == 0  # in this process: a new one would cost seconds and test nothing more
    report = json.loads(capsys.readouterr().out)
    expected = dk.generate(dk.load_model(f"hf:{saved_gpt2}"), ["Hi"], chain="greedy", max_new_tokens=6)
    assert report["samples"][0]["tokens"] == expected.tokens[0]

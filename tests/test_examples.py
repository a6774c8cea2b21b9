"""The examples run, and what they show is true."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import decodekit as dk

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_custom_sampler_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "custom_sampler.py")], capture_output=True, text=True, check=True
    ).stdout
    assert "in code:      no_token_zero | softcap(cap=5.0) | sample" in out
    assert "by name:      softcap(cap=5.0) | sample" in out
    assert "bad value:    softcap: cap=-1 is invalid" in out


def test_custom_sampler_numbers_and_registration() -> None:
    ex = load("custom_sampler")
    softcap = ex.Softcap(cap=5.0)
    logits = torch.tensor([[10.0, -10.0, 0.0, float("-inf")]])
    out = softcap(logits, dk.DecodeContext(tokens=torch.zeros(1, 1, dtype=torch.long)))
    # 5 · tanh(2) = 4.8201, 5 · tanh(-2) = -4.8201, 0 stays 0, -inf stays removed
    torch.testing.assert_close(out, torch.tensor([[4.8201379, -4.8201379, 0.0, float("-inf")]]))
    banned = ex.no_token_zero(torch.zeros(2, 3), dk.DecodeContext(tokens=torch.zeros(2, 1, dtype=torch.long)))
    assert banned[:, 0].eq(float("-inf")).all() and banned[:, 1:].eq(0).all()

    plugin = ex.SoftcapPlugin()
    dk.register_plugin(plugin, name="softcap-example")
    try:
        model = ex.GPT(ex.GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=16)).eval()
        by_name = dk.generate(model, [[1, 2, 3]], chain="softcap(5.0) | sample", max_new_tokens=8, seed=0)
        in_code = dk.generate(model, [[1, 2, 3]], chain=dk.Chain([ex.Softcap(cap=5.0)]), max_new_tokens=8, seed=0)
        assert by_name.tokens == in_code.tokens
        assert dk.Chain.parse("softcap(5.0)").to_spec() == [
            {"name": "softcap", "params": {"cap": 5.0}},
            {"name": "sample", "params": {}},
        ]
        with pytest.raises(dk.ParameterError, match="cap=-1 .*greater than 0"):
            dk.create("softcap", cap=-1)
    finally:
        dk.unregister_plugin(plugin)

"""train.py on a tiny config and a synthetic corpus: 2 steps + `--resume` 2 steps equal 4 straight steps,
bit for bit; the export is a folder both transformers and decodekit load."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import decodekit as dk

TRAIN_PY = Path(__file__).resolve().parents[1] / "train.py"


@pytest.fixture(scope="module")
def train_mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("decodekit_shakespeare_llama_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "my", "lord", "sweet", "night", "o", "love"]
    lines = [" ".join(rng.choice(words) for _ in range(8)).capitalize() + "." for _ in range(300)]
    path = tmp_path_factory.mktemp("data")
    (path / "shakespeare-train.txt").write_text("\n".join(lines[:250]) + "\n", encoding="utf-8")
    (path / "shakespeare-val.txt").write_text("\n".join(lines[250:]) + "\n", encoding="utf-8")
    return path


def _run(train_mod: ModuleType, data: Path, out: Path, *extra: str) -> torch.nn.Module:
    argv = ["--steps", "4", "--batch-size", "4", "--block-size", "32", "--n-layer", "2", "--n-head", "4",
            "--n-kv-head", "2", "--hidden", "32", "--intermediate", "64", "--warmup", "2", "--lr", "1e-2",
            "--log-every", "1", "--eval-every", "2", "--eval-windows", "4", "--save-every", "2",
            "--data", str(data), "--out", str(out), *extra]  # fmt: skip
    args, resume, export_dir = train_mod.parse_args(argv)
    model: torch.nn.Module = train_mod.train(args, resume=resume, export_dir=export_dir, log=lambda _: None)
    return model


def test_resume_is_bit_identical_and_the_export_loads(train_mod: ModuleType, data_dir: Path, tmp_path: Path) -> None:
    straight = _run(train_mod, data_dir, tmp_path / "a", "--export", str(tmp_path / "export"))
    _run(train_mod, data_dir, tmp_path / "b", "--stop-after", "2", "--export", str(tmp_path / "export-b"))
    assert not (tmp_path / "export-b").exists()  # exported only once the run reaches --steps
    _run(train_mod, data_dir, tmp_path / "b", "--resume")
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "a" / "checkpoint" / name))
        b = load_file(str(tmp_path / "b" / "checkpoint" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    folder = tmp_path / "export"
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)  # eval mode
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    text = "O sweet night my lord.\n"  # in the synthetic alphabet
    ids = torch.tensor([tokenizer.encode(text)])
    assert ids.shape[1] == len(text) and tokenizer.decode(ids[0].tolist()) == text
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, straight(input_ids=ids).logits)
    model = dk.load_model(f"tiny-shakespeare-llama:{folder}")
    assert model.tokenizer.encode(text) == ids[0].tolist()

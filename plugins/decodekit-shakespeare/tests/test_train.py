"""train.py's checkpoint/resume path: 2 + 2 steps must equal 4 straight steps, bit for bit."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import load_file

TRAIN_PY = Path(__file__).resolve().parents[1] / "train.py"


@pytest.fixture(scope="module")
def train_mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("decodekit_shakespeare_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "my", "lord", "sweet", "night", "o", "love"]
    lines = [" ".join(rng.choice(words) for _ in range(8)).capitalize() + "." for _ in range(300)]
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _argv(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--block-size",
        "32",
        "--n-layer",
        "2",
        "--n-head",
        "4",
        "--n-kv-head",
        "2",
        "--n-embd",
        "32",
        "--warmup",
        "2",
        "--lr",
        "1e-2",
        "--dropout",
        "0.1",
        "--eval-every",
        "2",
        "--eval-windows",
        "4",
        "--save-every",
        "100",
        "--log-every",
        "1",
        "--threads",
        "1",
        "--train-file",
        str(corpus),
        "--val-file",
        str(corpus),
        "--out",
        str(out),
        *extra,
    ]


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "checkpoint" / "model.safetensors"))


def test_resume_is_bit_identical(train_mod: ModuleType, corpus: Path, tmp_path: Path) -> None:
    straight, split = tmp_path / "straight", tmp_path / "split"
    args, _, _ = train_mod.parse_args(_argv(corpus, straight))
    train_mod.train(args, quiet=True)

    args, _, _ = train_mod.parse_args(_argv(corpus, split, "--stop-after", "2"))
    train_mod.train(args, quiet=True)
    assert json.loads((split / "checkpoint" / "state.json").read_text())["step"] == 2
    key = "h.0.attn.c_attn.weight"
    assert not torch.equal(_weights(split)[key], _weights(straight)[key])
    args, resume, _ = train_mod.parse_args(_argv(corpus, split, "--resume"))
    assert resume
    train_mod.train(args, resume=True, quiet=True)

    a, b = _weights(straight), _weights(split)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    opt_a = load_file(str(straight / "checkpoint" / "optimizer.safetensors"))
    opt_b = load_file(str(split / "checkpoint" / "optimizer.safetensors"))
    for name in opt_a:
        assert torch.equal(opt_a[name], opt_b[name]), name
    # Checkpoints are safetensors + JSON only: nothing pickled.
    assert sorted(p.name for p in (split / "checkpoint").iterdir()) == [
        "model.safetensors",
        "optimizer.safetensors",
        "state.json",
    ]


def test_export_loads(train_mod: ModuleType, corpus: Path, tmp_path: Path) -> None:
    from decodekit_shakespeare.model import load_tiny_shakespeare

    args, _, _ = train_mod.parse_args(_argv(corpus, tmp_path / "run", "--steps", "2"))
    trained = train_mod.train(args, export_dir=str(tmp_path / "export"), quiet=True)
    model = load_tiny_shakespeare(str(tmp_path / "export"))
    assert model.config == trained.config
    assert model.tokenizer.alphabet == "".join(sorted(set(corpus.read_text())))
    x = torch.tensor([model.tokenizer.encode("Thou art")])
    with torch.no_grad():
        assert torch.equal(model(x), trained(x))


def test_lstm_export_loads_as_a_draft(train_mod: ModuleType, corpus: Path, tmp_path: Path) -> None:
    from decodekit_shakespeare.model import ShakespeareLSTM, load_tiny_shakespeare_draft

    lstm = ("--arch", "lstm", "--n-layer", "1", "--n-embd", "16", "--n-input", "8", "--steps", "2")
    args, _, _ = train_mod.parse_args(_argv(corpus, tmp_path / "run", *lstm))
    trained = train_mod.train(args, export_dir=str(tmp_path / "export"), quiet=True)
    model = load_tiny_shakespeare_draft(str(tmp_path / "export"))
    assert isinstance(model, ShakespeareLSTM) and model.config == trained.config
    x = torch.tensor([model.tokenizer.encode("Thou art")])
    with torch.no_grad():
        assert torch.equal(model(x), trained(x))


def test_distill_fits_the_teacher(train_mod: ModuleType, corpus: Path, tmp_path: Path) -> None:
    """--distill: the loss is a KL divergence to the teacher (>= 0), over the teacher's tokenizer."""
    lstm = ("--arch", "lstm", "--n-layer", "1", "--n-embd", "16", "--n-input", "8", "--steps", "2")
    args, _, _ = train_mod.parse_args(
        _argv(corpus, tmp_path / "run", *lstm, "--distill", "tiny-shakespeare", "--block-size", "16")
    )
    model = train_mod.train(args, quiet=True)
    assert model.config.vocab_size == 84  # the teacher's alphabet, not the corpus's
    history = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())["history"]
    assert all(0.0 <= h["train_loss"] < 10.0 for h in history)

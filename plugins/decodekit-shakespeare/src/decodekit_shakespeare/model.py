"""Load the shipped `tiny-shakespeare` weights (safetensors, no pickle) and measure loss."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from decodekit_cache_window.calibration import CALIBRATION_NAME
from decodekit_gpt.gpt import GPT, GPTConfig
from safetensors.torch import load_file

from decodekit.errors import ParameterError
from decodekit.params import NoParams
from decodekit_shakespeare.lstm import LSTMConfig, LSTMModel
from decodekit_shakespeare.tokenizer import CharTokenizer

__all__ = [
    "CONFIG_NAME",
    "DRAFT_CONFIG_NAME",
    "DRAFT_WEIGHTS_NAME",
    "WEIGHTS_NAME",
    "ShakespeareGPT",
    "ShakespeareLSTM",
    "load_config",
    "load_tiny_shakespeare",
    "load_tiny_shakespeare_draft",
    "loss_per_char",
]

WEIGHTS_NAME = "tiny_shakespeare.safetensors"
CONFIG_NAME = "config.json"
DRAFT_WEIGHTS_NAME = "tiny_shakespeare_draft.safetensors"
DRAFT_CONFIG_NAME = "tiny_shakespeare_draft.json"


class ShakespeareGPT(GPT):
    """The reference `GPT` with the `CharTokenizer` it was trained with attached."""

    tokenizer: CharTokenizer


class ShakespeareLSTM(LSTMModel):
    """`LSTMModel` (a draft) with the `CharTokenizer` it was trained with attached."""

    tokenizer: CharTokenizer


def _package_dir() -> Path:
    return Path(str(resources.files("decodekit_shakespeare")))


def load_config(directory: Path | None = None, name: str = CONFIG_NAME) -> tuple[GPTConfig | LSTMConfig, CharTokenizer]:
    """The config (`LSTMConfig` when its `arch` is "lstm", else `GPTConfig`) and tokenizer of
    `config.json` (or `name`) in `directory` (default: shipped)."""
    path = (directory or _package_dir()) / name
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    kind = LSTMConfig if raw.get("arch") == "lstm" else GPTConfig
    names = {f.name for f in fields(kind)}
    config = kind(**{k: v for k, v in raw.items() if k in names})
    tokenizer = CharTokenizer(raw["alphabet"])
    if tokenizer.vocab_size != config.vocab_size:
        raise ParameterError(
            f"{path}: alphabet has {tokenizer.vocab_size} characters but vocab_size={config.vocab_size}; "
            "allowed: equal sizes"
        )
    return config, tokenizer


def load_tiny_shakespeare(argument: str | None = None, params: NoParams | None = None) -> ShakespeareGPT:
    """The `tiny-shakespeare` model in eval mode, fp32, on CPU, with `.tokenizer` attached.

    A `calibration.json` next to the weights becomes `model.calibration`, read by `window(size="auto")`
    when it is used (a broken file fails there, not here).

    argument: None for the shipped weights; or a directory holding `config.json` and
    `tiny_shakespeare.safetensors` (what `train.py --export DIR` writes); or a `.safetensors`
    file of weights for the shipped config. fp16/bf16 files are upcast to fp32.
    """
    model = _load("tiny-shakespeare", argument, WEIGHTS_NAME, CONFIG_NAME)
    if not isinstance(model, ShakespeareGPT):
        raise ParameterError(f"tiny-shakespeare: {argument} holds an LSTM; allowed: a GPT export")
    return model


def load_tiny_shakespeare_draft(
    argument: str | None = None, params: NoParams | None = None
) -> ShakespeareLSTM | ShakespeareGPT:
    """`tiny-shakespeare-draft`: a one-layer LSTM (`decodekit_shakespeare.lstm`) distilled from `tiny-shakespeare`,
    its draft for speculative decoding (shipped as `tiny_shakespeare_draft.safetensors` and
    `tiny_shakespeare_draft.json`). `argument` as for `load_tiny_shakespeare`: an LSTM or a GPT export."""
    return _load("tiny-shakespeare-draft", argument, DRAFT_WEIGHTS_NAME, DRAFT_CONFIG_NAME)


def _load(label: str, argument: str | None, weights_name: str, config_name: str) -> ShakespeareGPT | ShakespeareLSTM:
    directory: Path | None = None
    weights: Path
    if argument is None or argument == "":
        weights = _package_dir() / weights_name
    else:
        path = Path(argument).expanduser()
        if path.is_dir():
            if not (path / CONFIG_NAME).is_file():
                raise ParameterError(
                    f"{label}: directory {argument!r} has no {CONFIG_NAME}; allowed: nothing (shipped weights), "
                    f"a directory with {CONFIG_NAME} and {WEIGHTS_NAME} (train.py --export), or a .safetensors file"
                )
            directory, weights = path, path / WEIGHTS_NAME
        elif path.is_file() and path.suffix == ".safetensors":
            weights = path
        else:
            raise ParameterError(
                f"{label}: argument {argument!r} is invalid; allowed: nothing (shipped weights), "
                f"a directory with {CONFIG_NAME} and {WEIGHTS_NAME}, or a .safetensors file"
            )
    # An export directory holds train.py's names; the shipped files have their own.
    config, tokenizer = load_config(directory) if directory is not None else load_config(None, config_name)
    if not weights.is_file():
        raise ParameterError(f"{label}: weights file {weights} is missing")
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(weights)).items()}
    # The random init, which every weight below overwrites, draws from a fork of torch's global generator: a user's
    # own draws after loading a model are those of the same seed without it. (Not on the meta device: an nn.Embedding
    # built there imports torch's compiler, ~1 s a command.)
    model: ShakespeareGPT | ShakespeareLSTM
    with torch.random.fork_rng(devices=[]):
        model = ShakespeareLSTM(config) if isinstance(config, LSTMConfig) else ShakespeareGPT(config)
    if isinstance(model, GPT):
        state.pop("lm_head.weight", None)  # tied to wte.weight; re-tied by the constructor
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing_keys = sorted(set(missing) - ({"lm_head.weight"} if isinstance(model, GPT) else set()))
    if missing_keys or unexpected:
        raise ParameterError(
            f"{label}: {weights} does not fit the config: missing {missing_keys}, unexpected {sorted(unexpected)}"
        )
    model.tokenizer = tokenizer
    calibration = weights.parent / CALIBRATION_NAME  # `decodekit cache calibrate --json` of these weights
    if isinstance(model, GPT) and calibration.exists():
        model.calibration = calibration
    model.requires_grad_(False)
    return model.eval()


@torch.no_grad()
def loss_per_char(model: GPT | LSTMModel, ids: list[int] | torch.Tensor, batch_size: int = 16) -> float:
    """Mean next-character cross-entropy (nats/char) of `ids` under `model`, in eval mode.

    The text is cut into non-overlapping windows of `block_size` inputs; window `i` predicts
    characters `i*block_size + 1 .. (i+1)*block_size` from the ones before it in the window,
    so every character but the first is scored exactly once (the last window may be shorter).
    """
    data = torch.as_tensor(ids, dtype=torch.long)
    n = data.numel() - 1
    if n < 1:
        raise ParameterError("loss_per_char: need at least 2 tokens")
    T = model.config.block_size
    was_training = model.training
    model.eval()
    total = 0.0
    try:
        full = n // T
        if full:
            x = data[: full * T].view(full, T)
            y = data[1 : full * T + 1].view(full, T)
            for i in range(0, full, batch_size):
                logits = model(x[i : i + batch_size])
                total += F.cross_entropy(logits.flatten(0, 1), y[i : i + batch_size].flatten(), reduction="sum").item()
        if n > full * T:
            x = data[full * T : n].unsqueeze(0)
            y = data[full * T + 1 : n + 1].unsqueeze(0)
            total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
    finally:
        model.train(was_training)
    loss = total / n
    if not math.isfinite(loss):
        raise ParameterError("loss_per_char: the loss is not finite; the weights are broken")
    return loss

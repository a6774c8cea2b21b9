"""Load GPT-2 weights into the reference GPT, so decodekit's own model serves real GPT-2 checkpoints.

`load_gpt2(source)` takes a transformers `GPT2LMHeadModel` (or `GPT2Model`), or the path of
a local directory written by `save_pretrained` (`config.json` + `model.safetensors`, or
sharded with `model.safetensors.index.json`). The directory path needs neither transformers
nor pickle: the config is JSON and the tensors are read with the safetensors library.

GPT-2's `Conv1D` layers store their weight as `[in, out]`, the transpose of `nn.Linear`'s
`[out, in]`; the fused `c_attn` is `[q | k | v]` in both. GPT-2's "gelu_new" is the tanh
approximation the reference GPT uses, and its lm_head is tied to the token embedding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from decodekit.errors import ParameterError
from decodekit.param_types import words
from decodekit_gpt.gpt import GPT, GPTConfig

__all__ = ["gpt2_config", "load_gpt2", "load_gpt2_model"]

_TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def gpt2_config(config: Mapping[str, Any]) -> GPTConfig:
    """The `GPTConfig` of a GPT-2 `config.json`; raises `ParameterError` for what the reference GPT can't express."""

    def get(key: str, default: Any) -> Any:
        value = config.get(key, default)
        return default if value is None else value

    model_type = config.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise ParameterError(f"load_gpt2: model_type={model_type!r}; allowed: 'gpt2'")
    n_embd = int(get("n_embd", 768))
    checks = {
        "activation_function": (get("activation_function", "gelu_new"), _TANH_GELU),
        "n_inner": (get("n_inner", 4 * n_embd), (4 * n_embd,)),
        "scale_attn_weights": (get("scale_attn_weights", True), (True,)),
        "scale_attn_by_inverse_layer_idx": (get("scale_attn_by_inverse_layer_idx", False), (False,)),
        "tie_word_embeddings": (get("tie_word_embeddings", True), (True,)),
        "add_cross_attention": (get("add_cross_attention", False), (False,)),
    }
    for key, (value, allowed) in checks.items():
        if value not in allowed:
            raise ParameterError(
                f"load_gpt2: {key}={value!r} is not supported by the reference GPT; allowed: "
                + ", ".join(repr(a) for a in allowed)
            )
    return GPTConfig(
        vocab_size=int(get("vocab_size", 50257)),
        block_size=int(get("n_positions", 1024)),
        n_layer=int(get("n_layer", 12)),
        n_head=int(get("n_head", 12)),
        n_embd=n_embd,
        layer_norm_epsilon=float(get("layer_norm_epsilon", 1e-5)),
    )


def _read_directory(path: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    try:
        from safetensors.torch import load_file  # only this path needs safetensors
    except ImportError:
        raise ParameterError(
            f"load_gpt2: reading {path} needs the safetensors package: pip install safetensors"
        ) from None

    config_file = path / "config.json"
    if not config_file.is_file():
        raise ParameterError(f"load_gpt2: {path} has no config.json; allowed: a directory written by save_pretrained")
    config = json.loads(config_file.read_text())
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        raise ParameterError(
            f"load_gpt2: {path} has no model.safetensors; allowed: a safetensors checkpoint "
            "(pickled pytorch_model.bin files are not read)"
        )
    tensors: dict[str, Tensor] = {}
    for shard in shards:
        tensors.update(load_file(str(path / shard)))
    return config, tensors


def _gpt2_tensors(tensors: Mapping[str, Tensor], config: GPTConfig) -> dict[str, Tensor]:
    """Map GPT-2 names and layouts onto the reference GPT's `state_dict` names."""
    # Checkpoints name the trunk "transformer.*" (GPT2LMHeadModel) or leave it bare (GPT2Model, old uploads).
    prefix = "transformer." if any(k.startswith("transformer.") for k in tensors) else ""
    wanted = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
    for i in range(config.n_layer):
        for part in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            wanted += [f"h.{i}.{part}.weight", f"h.{i}.{part}.bias"]
    missing = [prefix + name for name in wanted if prefix + name not in tensors]
    if missing:
        raise ParameterError(f"load_gpt2: the checkpoint lacks {missing[0]} ({len(missing)} tensors missing)")
    out = {}
    for name in wanted:
        t = tensors[prefix + name]
        out[name] = t.t() if name.endswith(_CONV1D) else t  # Conv1D [in, out] -> Linear [out, in]
    head = tensors.get("lm_head.weight")
    if head is not None and not torch.equal(head, out["wte.weight"]):
        raise ParameterError("load_gpt2: lm_head.weight differs from wte.weight; the reference GPT ties them")
    return out


def load_gpt2(source: Any, *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> GPT:
    """A reference `GPT` (in eval mode) holding the weights of a GPT-2 checkpoint.

    source: a transformers `GPT2LMHeadModel`/`GPT2Model`, or a local directory written by
    `save_pretrained` (read with safetensors; no transformers import, no pickle).
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_dir():
            raise ParameterError(f"load_gpt2: {str(path)!r} is not a directory; allowed: a save_pretrained directory")
        raw_config, tensors = _read_directory(path)
    elif hasattr(source, "config") and hasattr(source, "state_dict"):
        raw_config, tensors = source.config.to_dict(), dict(source.state_dict())
    else:
        raise ParameterError(
            f"load_gpt2: source of type {type(source).__name__}; allowed: a GPT2LMHeadModel or a directory path"
        )
    config = gpt2_config(raw_config)
    state = _gpt2_tensors(tensors, config)
    with torch.device("meta"):  # skip the random init: every weight is overwritten below
        model = GPT(config)
    model.to_empty(device=device)
    model.lm_head.weight = model.wte.weight  # to_empty made separate tensors; tie them again
    expected = set(model.state_dict()) - {"lm_head.weight"}
    if expected != set(state):
        raise ParameterError(f"load_gpt2: weights {sorted(expected ^ set(state))} do not match the reference GPT")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.shape != state[name].shape:
                raise ParameterError(
                    f"load_gpt2: {name} has shape {tuple(state[name].shape)}; the config implies {tuple(param.shape)}"
                )
            param.copy_(state[name])
    return model.to(dtype).eval()


def load_gpt2_model(argument: str | None, params: object = None) -> GPT:
    """The `gpt2` model loader: `dk.load_model("gpt2:/path")` reads a local `save_pretrained` directory."""
    if not argument:
        how = words("dk.load_model('gpt2:/path/to/local/checkpoint')", "--model gpt2:/path/to/local/checkpoint")
        raise ParameterError(f"gpt2: no checkpoint path; allowed: {how}")  # in the words of Python or the CLI
    path = Path(argument).expanduser()
    if not path.is_dir():
        raise ParameterError(f"gpt2: {argument!r} is not a directory; allowed: a save_pretrained directory")
    return load_gpt2(path)

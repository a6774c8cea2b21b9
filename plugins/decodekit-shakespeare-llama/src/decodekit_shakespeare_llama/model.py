"""The `tiny-shakespeare-llama` loader, and its loss on a text in sliding windows."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from decodekit_hf.model import HFModel, load_hf
from torch import nn

from decodekit.params import NoParams
from decodekit_shakespeare_llama import model_dir

__all__ = ["load_tiny_shakespeare_llama", "loss_per_char"]


def load_tiny_shakespeare_llama(argument: str | None = None, params: NoParams | None = None) -> HFModel:
    """The shipped model (eval mode, fp32, CPU) as an `HFModel` with its tokenizer; offline.

    argument: None for the shipped folder, or another `train.py --export` folder
    (`dk.load_model("tiny-shakespeare-llama:DIR")`).
    """
    return load_hf(argument or str(model_dir()))


@torch.no_grad()
def loss_per_char(model: nn.Module, ids: Sequence[int], block: int, stride: int, batch: int = 16) -> float:
    """Mean loss (nats/char) of a transformers causal LM on `ids`, every character but the first scored once.

    Windows of `block` characters end `stride` apart (the last ends at the text's end); each window
    scores the characters after the previous window's end, so every character past the first window
    is predicted from at least `block - stride` characters of left context (`stride < block`).
    """
    if not 0 < stride < block or len(ids) < 2:
        raise ValueError(f"loss_per_char: need 0 < stride < block and 2+ ids; got stride {stride}, block {block}")
    text = torch.tensor(ids, dtype=torch.long)
    n = len(ids)
    ends = [*range(min(block, n), n, stride), n]
    scored_from = [1, *ends[:-1]]  # the first position each window scores
    total = 0.0
    for i in range(0, len(ends), batch):
        # one batch of full windows (all `block` long, except a text shorter than `block`)
        windows = torch.stack([text[max(0, e - block) : e] for e in ends[i : i + batch]])  # [W, T]
        logits = model(input_ids=windows, use_cache=False).logits[:, :-1].float()  # [W, T-1, V]
        nll = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")  # [W, T-1]
        for row, (end, first) in enumerate(zip(ends[i : i + batch], scored_from[i : i + batch])):
            start = max(0, end - block)
            total += nll[row, first - start - 1 :].sum().item()  # column j predicts position start + j + 1
    return total / (n - 1)

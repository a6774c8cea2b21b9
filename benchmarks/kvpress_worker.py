"""kvpress's side of bench_kvpress.py; runs in kvpress's own venv (it pins transformers < 5.3), never imports decodekit.

    build/kvpress-venv/bin/python benchmarks/kvpress_worker.py REQUEST.json > RESULT.json

The request names the model folder, the samples (token ids: a prompt, then its continuation), the methods
and compression ratios. For each: the continuation's mean loss with the prompt compressed at prefill (the
continuation teacher-forced in one forward at its own positions, as kvpress's pipeline feeds a question),
and the seconds of kvpress's prefill + greedy decode of the continuation's length (its pipeline's loop).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from kvpress import KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress
from transformers import AutoModelForCausalLM, DynamicCache


def make_press(method: str, compression: float, window: int) -> Any:
    if method == "streaming":
        return StreamingLLMPress(compression_ratio=compression, n_sink=4)
    if method == "snapkv":
        return SnapKVPress(compression_ratio=compression, window_size=window, kernel_size=5)
    if method == "tova":
        return TOVAPress(compression_ratio=compression)
    return KnormPress(compression_ratio=compression)


@torch.no_grad()
def loss(model: Any, press: Any, prompt: torch.Tensor, continuation: torch.Tensor) -> float:
    """Mean NLL of `continuation` after `prompt` compressed by `press` at prefill."""
    cache = DynamicCache()
    P, C = prompt.shape[1], continuation.shape[1]
    with press(model):
        first = model(input_ids=prompt, past_key_values=cache).logits[:, -1:]
    rest = model(
        input_ids=continuation[:, :-1], past_key_values=cache, position_ids=torch.arange(P, P + C - 1)[None]
    ).logits
    logits = torch.cat([first, rest], 1)[0].float()
    return float(F.cross_entropy(logits, continuation[0], reduction="mean"))


@torch.no_grad()
def generate(model: Any, press: Any, prompt: torch.Tensor, new: int) -> float:
    """Seconds of a prefill with `press` and `new` greedy tokens, the loop of kvpress's pipeline."""
    start = time.perf_counter()
    cache = DynamicCache()
    with press(model):
        logits = model(input_ids=prompt, past_key_values=cache, logits_to_keep=1).logits
    token = logits[0, -1].argmax()
    position = torch.tensor([[prompt.shape[1]]])
    for i in range(new - 1):
        out = model(input_ids=token.view(1, 1), past_key_values=cache, position_ids=position + i)
        token = out.logits[0, -1].argmax()
    return time.perf_counter() - start


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    torch.set_num_threads(request["threads"])
    model = AutoModelForCausalLM.from_pretrained(request["model_dir"], local_files_only=True)
    model.eval()  # type: ignore[no-untyped-call]
    P = request["prompt"]
    samples = [torch.tensor([ids]) for ids in request["samples"]]
    results = []
    for method in request["methods"]:
        for compression in request["compressions"]:
            press = make_press(method, compression, request["window"])
            losses = [loss(model, press, s[:, :P], s[:, P:]) for s in samples] if request["loss"] else [float("nan")]
            times = [generate(model, press, s[:, :P], s.shape[1] - P) for s in samples[: request["timed"]]]
            results.append(
                {
                    "method": method,
                    "compression": compression,
                    "loss": statistics.mean(losses),
                    "seconds": statistics.median(times),
                }
            )
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    from importlib.metadata import version  # kvpress has no __version__

    versions = {"kvpress": version("kvpress"), "transformers": version("transformers")}
    print(json.dumps({"versions": versions, "results": results}))


if __name__ == "__main__":
    main()

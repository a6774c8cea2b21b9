"""decodekit's scored caches side by side with kvpress (NVIDIA), on the same model, text and prompt length.

The methods both have at prefill: StreamingLLM, SnapKV, TOVA and key-norm, at compression 0.25, 0.5 and
0.75 of a prompt of `--prompt` tokens (kvpress keeps int(P·(1−c)); decodekit gets that as `budget`, and
`prefill_only=True`, kvpress's semantics: the prompt compressed, every later token kept). Per
sample (`--samples` windows of Hamlet, evenly spaced): the prompt is compressed at prefill, then the next
`--new` tokens are teacher-forced in one forward at their own positions; the loss is theirs, averaged.
Time: the prompt's prefill plus `--new` greedy tokens (decodekit: `dk.generate`; kvpress: its pipeline's
loop), the median over `--timed` samples, each side run twice in alternation, method by method (the faster run
counts: on a shared machine the load drifts, and a method's four runs lie within a minute or two). decodekit is
timed three ways: `prefill_only` eager and with `compile=True` (its compilation not counted: one warm-up
decode per cell, whose tokens must equal eager's), and the cache without `prefill_only`, which evicts to its
budget at every token (more work than kvpress does, for memory that stays bounded).

kvpress pins transformers < 5.3, so it runs in a venv of its own, made once (nothing fetched is committed;
build/ is git-ignored):

    python benchmarks/bench_kvpress.py --setup
    python benchmarks/bench_kvpress.py [--samples 32] [--timed 8] [--json benchmarks/results/kvpress.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from decodekit_shakespeare.texts import hamlet
from decodekit_shakespeare_llama import model_dir

import decodekit as dk

VENV = Path("build/kvpress-venv")
WORKER = Path(__file__).with_name("kvpress_worker.py")
METHODS = ("streaming", "snapkv", "tova", "knorm")
COMPRESSIONS = (0.25, 0.5, 0.75)
WINDOW = 16  # SnapKV's observation window, both sides


def setup(venv: Path) -> None:
    """A venv with the CPU torch the Makefile pins, kvpress and the transformers it allows."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, os.environ.get("TORCH", "torch==2.13.0")], check=True)
    subprocess.run([*pip, "kvpress==0.5.5", "transformers<5.3"], check=True)


def cache_string(method: str, kept: int) -> str:
    """decodekit's cache for kvpress's press of the same name, keeping `kept` entries."""
    return {
        "streaming": f"streaming(budget={kept}, sinks=4, recent=0)",
        "snapkv": f"snapkv(budget={kept}, window={WINDOW}, kernel=5, sinks=0, recent=0)",
        "tova": f"tova(budget={kept}, sinks=0, recent=1)",  # kvpress keeps the prompt's last token
        "knorm": f"knorm(budget={kept}, sinks=0, recent=0)",
    }[method]


@torch.no_grad()
def our_loss(model: Any, cache: str, prompt: torch.Tensor, continuation: torch.Tensor) -> float:
    P, C = prompt.numel(), continuation.numel()
    kv = dk.create_cache(cache, dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=P + C))
    first = model(prompt[None], torch.arange(P)[None], kv)[:, -1:]
    rest = model(continuation[None, :-1], torch.arange(P, P + C - 1)[None], kv)
    return float(F.cross_entropy(torch.cat([first, rest], 1)[0].float(), continuation, reduction="mean"))


def our_time(model: Any, cache: str, prompt: list[int], new: int, compile: bool = False) -> float:
    start = time.perf_counter()
    dk.generate(model, [prompt], chain="greedy", cache=cache, max_new_tokens=new, compile=compile)
    return time.perf_counter() - start


def compiled_time(model: Any, cache: str, samples: list[list[int]], prompt_length: int) -> float:
    """The median `compile=True` time, once a warm-up decode (checked against eager) has compiled it."""
    P = prompt_length
    prompt, new = samples[0][:P], len(samples[0]) - P
    torch._dynamo.reset()  # each cache in a fresh compiler, as a process that serves one: 12 would pass dynamo's
    # recompile limit for the model's frame (8), which then runs eager
    eager, compiled = (
        dk.generate(model, [prompt], chain="greedy", cache=cache, max_new_tokens=new, compile=c).tokens
        for c in (False, True)
    )
    assert compiled == eager, f"{cache}: compile=True parted from eager"
    return statistics.median(our_time(model, cache, s[:P], len(s) - P, True) for s in samples)


def ours(
    model: Any, samples: list[list[int]], args: argparse.Namespace, method: str, with_loss: bool
) -> list[dict[str, Any]]:
    P, out = args.prompt, []
    for c in COMPRESSIONS:
        evicting = cache_string(method, max(1, int(P * (1 - c))))
        cache = evicting[:-1] + ", prefill_only=True)"
        data = [torch.tensor(s) for s in samples]
        losses = [our_loss(model, cache, s[:P], s[P:]) for s in data] if with_loss else [float("nan")]
        timed = samples[: args.timed]
        out.append(
            {
                "method": method,
                "compression": c,
                "cache": cache,
                "loss": statistics.mean(losses),
                "seconds": statistics.median(our_time(model, cache, s[:P], len(s) - P) for s in timed),
                "compiled_seconds": compiled_time(model, cache, timed, P),
                "evicting_seconds": statistics.median(our_time(model, evicting, s[:P], len(s) - P) for s in timed),
            }
        )
        r = out[-1]
        print(
            f"decodekit {cache:76} loss {r['loss']:.4f}  {r['seconds']:.3f} s, compiled {r['compiled_seconds']:.3f} s, "
            f"evicting {r['evicting_seconds']:.3f} s",
            flush=True,
        )
    return out


def theirs(samples: list[list[int]], args: argparse.Namespace, method: str, with_loss: bool) -> dict[str, Any]:
    request = {
        "model_dir": str(model_dir()),
        "samples": samples,
        "prompt": args.prompt,
        "methods": [method],
        "compressions": list(COMPRESSIONS),
        "window": WINDOW,
        "timed": args.timed,
        "threads": args.threads,
        "loss": with_loss,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(request, f)
    run = subprocess.run(
        [str(args.venv / "bin" / "python"), str(WORKER), f.name], check=True, capture_output=True, text=True
    )
    return dict(json.loads(run.stdout))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", action="store_true", help="create the venv (--venv) and exit")
    p.add_argument("--venv", type=Path, default=VENV, help="kvpress's venv (default: build/kvpress-venv)")
    p.add_argument("--prompt", type=int, default=192)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--timed", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if args.setup:
        setup(args.venv)
        return
    torch.set_num_threads(args.threads)
    model = dk.load_model("tiny-shakespeare-llama")
    ids = model.tokenizer.encode(hamlet().read_text(encoding="utf-8"))
    width = args.prompt + args.new
    starts = torch.linspace(0, len(ids) - width, args.samples).long().tolist()
    samples = [ids[s : s + width] for s in starts]
    runs, versions = [], {}
    for method in METHODS:
        a, k = ours(model, samples, args, method, True), theirs(samples, args, method, True)
        a2, k2 = ours(model, samples, args, method, False), theirs(samples, args, method, False)
        runs += list(zip(a, a2, k["results"], k2["results"]))
        versions = k["versions"]
    rows = []
    for x, x2, y, y2 in runs:
        row = {
            **x,
            "kvpress_loss": y["loss"],
            "loss_vs_kvpress": x["loss"] / y["loss"] - 1,
            **{key: min(x[key], x2[key]) for key in ("seconds", "compiled_seconds", "evicting_seconds")},
            "kvpress_seconds": min(y["seconds"], y2["seconds"]),
        }
        for key in ("", "compiled_", "evicting_"):
            row[f"{key}time_vs_kvpress"] = row[f"{key}seconds"] / row["kvpress_seconds"]
        rows.append(row)
        print(
            f"{row['method']:9} c={row['compression']:.2f}  loss {row['loss']:.4f} vs {row['kvpress_loss']:.4f} "
            f"({100 * row['loss_vs_kvpress']:+.2f}%)  time {row['seconds']:.3f} / compiled "
            f"{row['compiled_seconds']:.3f} / evicting {row['evicting_seconds']:.3f} vs {row['kvpress_seconds']:.3f} s "
            f"(x{row['time_vs_kvpress']:.2f} / x{row['compiled_time_vs_kvpress']:.2f} / "
            f"x{row['evicting_time_vs_kvpress']:.2f})"
        )
    result = {
        "prompt": args.prompt,
        "new": args.new,
        "samples": args.samples,
        "timed": args.timed,
        "kvpress": versions,
        "rows": rows,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

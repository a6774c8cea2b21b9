"""Streaming far past the context: 100,000 tokens through `window(size="auto")` and through H2O.

For each cache (`--caches`): the cache's bytes as the stream grows (constant once full), the median
ms/token of tokens 1,000-2,000 and of the last 1,000 (their ratio: a step costs the same at token
100,000 as at 1,000), one step at token 1,500 and at 100,000 timed in alternation, and the process's
peak resident memory; then the same run with `gqa`, which stops at the model's context with an error.
One row, one thread, the default chain. The default model is the trained Hugging Face Llama; its D_f
for "auto" is calibrated here on Hamlet unless it ships a calibration.

    python benchmarks/bench_window_stream.py [--model tiny-shakespeare-llama] [--tokens 100000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from bench_cache_loss import with_windows
from decodekit_shakespeare.texts import hamlet

import decodekit as dk
from decodekit.cache import observes
from decodekit.plugins import cache_factory

CACHES = ('window(size="auto")', "h2o(budget=128, recent=64)")


def stream(model: Any, cache: str, tokens: int) -> dict[str, Any]:
    held: list[Any] = []  # the cache the decode built (its nbytes is read as it grows)
    factory = cache_factory(cache)

    def make(spec: dk.CacheSpec) -> dk.KVCache:
        kv = factory(spec)
        held.append(kv)
        return kv

    marks = {n for n in (100, 1_000, 10_000, tokens // 2, tokens)}
    nbytes: dict[int, int] = {}
    times: list[float] = []
    last = time.perf_counter()
    for event in dk.stream(model, "ROMEO:", cache=make, max_new_tokens=tokens, seed=0):
        now = time.perf_counter()
        times.append(now - last)
        last = now
        if event.step + 1 in marks:
            nbytes[event.step + 1] = held[0].nbytes
    early = statistics.median(times[1_000:2_000]) * 1e3
    late = statistics.median(times[-1_000:]) * 1e3
    return {
        "cache": str(factory),
        "tokens": len(times),
        "nbytes": nbytes,
        "ms_per_token_1000_2000": early,
        "ms_per_token_last_1000": late,
        "ratio": late / early,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


@torch.no_grad()
def fill(kv: dk.KVCache, n: int, block: int = 16) -> None:
    """Feed `n` random tokens to every layer as a model would (update, mask, and the queries if it observes)."""
    spec = kv.spec
    for start in range(0, n, block):
        T = min(block, n - start)
        positions = torch.arange(start, start + T)[None]
        for layer in range(spec.n_layers):
            z = torch.randn(1, spec.n_kv_heads, T, spec.head_dim)
            kv.update(layer, z, z)
            kv.attention_mask(layer, positions)
            if observes(kv):
                kv.observe(layer, torch.randn(1, spec.n_heads, T, spec.head_dim))  # type: ignore[attr-defined]


@torch.no_grad()
def interleaved_steps(model: Any, cache: str, early: int, late: int, rounds: int = 300) -> dict[str, float]:
    """Median ms of one decode step on a cache fed `early` tokens and on one fed `late`, timed in
    alternation in this process, so machine load hits both alike. The caches are filled with random
    keys, values and queries (a step's cost does not depend on their values)."""
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=late + rounds)
    caches = []
    for n in (early, late):
        kv = cache_factory(cache)(spec)
        fill(kv, n)
        caches.append(kv)
    times: list[list[float]] = [[], []]
    token = torch.zeros(1, 1, dtype=torch.long)
    for r in range(rounds):
        for i in (0, 1) if r % 2 else (1, 0):  # the order alternates: neither always runs first
            kv = caches[i]
            t0 = time.perf_counter()
            model(token, torch.tensor([[kv.length]]), kv)
            times[i].append(time.perf_counter() - t0)
    a, b = (statistics.median(t) * 1e3 for t in times)
    return {"early_tokens": early, "late_tokens": late, "early_ms": a, "late_ms": b, "ratio": b / a}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-shakespeare-llama")
    p.add_argument("--caches", nargs="+", default=list(CACHES))
    p.add_argument("--tokens", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = dk.load_model(args.model)
    windows = with_windows(model, hamlet().read_text(encoding="utf-8"))
    results: dict[str, Any] = {"model": args.model, "windows": windows, "runs": []}
    for cache in args.caches:
        result = stream(model, cache, args.tokens)
        print(f"{result['cache']}: {result['tokens']:,} tokens")
        for n, b in sorted(result["nbytes"].items()):
            print(f"  cache bytes after {n:>7,} tokens: {b:,}")
        print(
            f"  ms/token, tokens 1,000-2,000: {result['ms_per_token_1000_2000']:.3f}; last 1,000: "
            f"{result['ms_per_token_last_1000']:.3f}; ratio {result['ratio']:.3f} (target <= 1.1)"
        )
        print(f"  peak process memory (max RSS): {result['peak_rss_mb']:.0f} MB")
        steps = interleaved_steps(model, cache, 1_500, args.tokens)
        result["interleaved"] = steps
        print(
            f"  one step, timed in alternation: at token {steps['early_tokens']:,} {steps['early_ms']:.3f} ms, "
            f"at token {steps['late_tokens']:,} {steps['late_ms']:.3f} ms; ratio {steps['ratio']:.3f}",
            flush=True,
        )
        results["runs"].append(result)
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1))
    try:
        dk.generate(model, "ROMEO:", cache="gqa", max_new_tokens=args.tokens, seed=0)
        results["gqa"] = "no error"
    except dk.DecodekitError as exc:
        results["gqa"] = f"{type(exc).__name__}: {exc}"
    print(f"gqa, same run: {results['gqa']}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

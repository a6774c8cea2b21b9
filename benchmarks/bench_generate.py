"""Decode-loop overhead: `dk.generate` against a hand-written minimal loop on the same model and cache.

Reference GPT: 2 layers, 128 dims, 4 heads, vocabulary 50,257; batch 1, 32-token prompt,
128 new tokens. The minimal loop is forward + argmax and nothing else. Both run in this
process, interleaved, and the figure reported is the ratio of medians (time per token of
decodekit / time per token of the minimal loop). Also: the cost of appending one token to a
dense cache at position 2,000 relative to position 20.

    python benchmarks/bench_generate.py [--repeats 15] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import decodekit as dk
from decodekit.models.gpt import GPT, GPTConfig

FULL_CHAIN = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample"


def minimal_loop(model: GPT, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Prefill, then forward + argmax per token against a dense cache: nothing else."""
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=prompt.shape[1] + new_tokens)
    cache = dk.create_cache("dense", spec)
    pos = torch.arange(prompt.shape[1] + new_tokens)[None]
    T = prompt.shape[1]
    tok = model(prompt, pos[:, :T], cache)[:, -1].argmax(-1, keepdim=True)
    out = [tok]
    for t in range(T, T + new_tokens - 1):
        tok = model(tok, pos[:, t : t + 1], cache)[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_loop(repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=2, n_head=4, n_embd=128)).eval()
    prompt = torch.randint(0, 50257, (1, 32))
    new = 128
    greedy = dk.Chain([], selector=dk.create("greedy"))
    full = dk.Chain.parse(FULL_CHAIN)
    cases: dict[str, Callable[[], object]] = {
        "minimal loop": lambda: minimal_loop(model, prompt, new),
        "dk greedy": lambda: dk.generate(model, prompt, chain=greedy, max_new_tokens=new, seed=0),
        "dk full chain": lambda: dk.generate(model, prompt, chain=full, max_new_tokens=new, seed=0),
    }
    # Same tokens: the loop is only overhead, not a different computation.
    assert (
        dk.generate(model, prompt, chain=greedy, max_new_tokens=new).tokens[0]
        == minimal_loop(model, prompt, new)[0].tolist()
    )
    times: dict[str, list[float]] = {k: [] for k in cases}
    with torch.inference_mode():
        for fn in cases.values():
            fn()  # warm-up
        for _ in range(repeats):
            for name, fn in cases.items():
                times[name].append(timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def bench_cache_append(repeats: int) -> tuple[float, float]:
    """Median seconds to append one token (every layer) at position 20 and at position 2,000."""
    spec = dk.CacheSpec(n_layers=12, n_heads=12, n_kv_heads=12, head_dim=64, batch_size=1, capacity=2048)
    k = torch.randn(1, 12, 1, 64)
    caches = {}
    for position in (20, 2000):
        cache = dk.create_cache("dense", spec)
        fill = torch.randn(1, 12, position, 64)
        for layer in range(12):
            cache.update(layer, fill, fill)
        caches[position] = cache

    def append_at(position: int) -> float:
        cache = caches[position]
        start = time.perf_counter()
        for layer in range(12):
            cache.update(layer, k, k)
        elapsed = time.perf_counter() - start
        cache.crop(position)  # back to where it was
        return elapsed

    samples: dict[int, list[float]] = {20: [], 2000: []}
    for _ in range(repeats * 50):
        for position in (20, 2000):
            samples[position].append(append_at(position))
    return statistics.median(samples[20]), statistics.median(samples[2000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t = bench_loop(args.repeats)
    base = t["minimal loop"]
    print("| loop (batch 1, 32-token prompt, 128 new tokens) | ms/token | ratio to minimal loop |")
    print("|---|---|---|")
    for name, seconds in t.items():
        print(f"| {name} | {seconds / 128 * 1e3:.3f} | {seconds / base:.3f}x |")
    at20, at2000 = bench_cache_append(args.repeats)
    print()
    print("| dense cache append, 12 layers | µs | ratio |")
    print("|---|---|---|")
    print(f"| at position 20 | {at20 * 1e6:.1f} | 1.000x |")
    print(f"| at position 2,000 | {at2000 * 1e6:.1f} | {at2000 / at20:.3f}x |")


if __name__ == "__main__":
    main()

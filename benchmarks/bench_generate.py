"""Decode-loop overhead: `dk.generate` against a hand-written minimal loop on the same model and cache.

Reference GPT: 2 layers, 128 dims, 4 heads, vocabulary 50,257; batch 1, 32-token prompt,
128 new tokens. The minimal loop is forward + argmax and nothing else. Both run in this
process, interleaved round by round (the order rotating), and the figure reported is the
median over rounds of each round's ratio (decodekit's time / the minimal loop's time, 128
tokens each), with the quartiles of those ratios. A second table times every decode step on
its own (forward + argmax; forward + chain + the loop's bookkeeping: from the start of one
forward to the start of the next, in both loops, see `StepClock`) and compares median
steps: a burst of load on a shared machine then costs a few steps rather than a whole run.
Also: the cost of appending one token to a dense cache at position 2,000 relative to 20.
With `--compile`, the same rows for `dk.generate(..., compile=True)` (compiled before timing).

    python benchmarks/bench_generate.py [--repeats 15] [--threads 1] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk

FULL_CHAIN = "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample"


class StepClock:
    """A model that notes when each of its calls starts; everything else is the wrapped model's.

    A decode step, in any loop, is then the time from one forward's start to the next's: the
    forward, the selection and the loop's bookkeeping, measured the same way in every loop and
    without touching the loop itself (`dk.generate` is timed as it is).
    """

    def __init__(self, model: GPT) -> None:
        self.model = model
        self.starts: list[float] = []

    # Under `compile=True` this frame runs eagerly (its clock is no graph) and the model's is compiled.
    @torch.compiler.disable(recursive=False)  # type: ignore[untyped-decorator, no-untyped-call]
    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.starts.append(time.perf_counter())
        out: torch.Tensor = self.model(*args, **kwargs)
        return out

    def __getattr__(self, name: str) -> Any:  # spec, parameters, supports_last_only, ...
        return getattr(self.model, name)

    def decode_steps(self) -> list[float]:
        """Seconds of each decode step whose next forward started (the prefill is call 0)."""
        return [b - a for a, b in zip(self.starts[1:], self.starts[2:])]


def minimal_loop(model: GPT | StepClock, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Prefill (the last column's logits only, as `dk.generate` asks), then forward + argmax per
    token against a dense cache: nothing else."""
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=prompt.shape[1] + new_tokens)
    cache = dk.create_cache("dense", spec)
    pos = torch.arange(prompt.shape[1] + new_tokens)[None]
    T = prompt.shape[1]
    tok = model(prompt, pos[:, :T], cache, last_only=True)[:, -1].argmax(-1, keepdim=True)
    out = [tok]
    for t in range(T, T + new_tokens - 1):
        tok = model(tok, pos[:, t : t + 1], cache)[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1)


def minimal_step_times(model: GPT, prompt: torch.Tensor, new_tokens: int) -> list[float]:
    """`minimal_loop`'s decode steps (forward + argmax), each timed by a `StepClock`."""
    clock = StepClock(model)
    minimal_loop(clock, prompt, new_tokens)
    return clock.decode_steps()


def dk_step_times(
    model: GPT, prompt: torch.Tensor, chain: dk.Chain, new_tokens: int, compile: bool = False
) -> list[float]:
    """`dk.generate`'s decode steps (forward + chain + the loop's bookkeeping), each timed by a `StepClock`."""
    clock = StepClock(model)
    dk.generate(clock, prompt, chain=chain, max_new_tokens=new_tokens, seed=0, compile=compile)
    return clock.decode_steps()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_loop(repeats: int, compile: bool = False) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
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
    if compile:
        cases["dk greedy [compile]"] = lambda: dk.generate(
            model, prompt, chain=greedy, max_new_tokens=new, seed=0, compile=True
        )
        cases["dk full chain [compile]"] = lambda: dk.generate(
            model, prompt, chain=full, max_new_tokens=new, seed=0, compile=True
        )
    # Same tokens: the loop is only overhead, not a different computation.
    assert (
        dk.generate(model, prompt, chain=greedy, max_new_tokens=new).tokens[0]
        == minimal_loop(model, prompt, new)[0].tolist()
    )
    stepwise: dict[str, Callable[[], list[float]]] = {
        "minimal loop": lambda: minimal_step_times(model, prompt, new),
        "dk greedy": lambda: dk_step_times(model, prompt, greedy, new),
        "dk full chain": lambda: dk_step_times(model, prompt, full, new),
    }
    if compile:
        stepwise["dk greedy [compile]"] = lambda: dk_step_times(model, prompt, greedy, new, compile=True)
        stepwise["dk full chain [compile]"] = lambda: dk_step_times(model, prompt, full, new, compile=True)
    times: dict[str, list[float]] = {k: [] for k in cases}
    steps: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    with torch.inference_mode():
        for fn in cases.values():
            fn()  # warm-up
        for r in range(repeats):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
            for name in order:
                times[name].append(timed(cases[name]))
            for name in order:
                steps[name].extend(stepwise[name]())
    return times, steps


def summarise(times: dict[str, list[float]], base: str) -> dict[str, tuple[float, float, float, float]]:
    """Per case: (median seconds, median of the per-round ratios to `base`, its lower and upper quartile).

    A round runs every case once, back to back, so its ratios share the machine's state at that
    moment; their median is steadier on a shared machine than a ratio of overall medians.
    """
    out = {}
    for name, seconds in times.items():
        ratios = sorted(t / b for t, b in zip(seconds, times[base]))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        out[name] = (statistics.median(seconds), statistics.median(ratios), q1, q3)
    return out


def bench_cache_append(repeats: int) -> tuple[float, float]:
    """Median seconds to append one token (every layer) at position 20 and at position 2,000."""
    spec = dk.CacheSpec(n_layers=12, n_heads=12, n_kv_heads=12, head_dim=64, batch_size=1, capacity=2048)
    k = torch.randn(1, 12, 1, 64)
    caches: dict[int, Any] = {}  # dense caches: they crop
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
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also time dk.generate(..., compile=True)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    times, steps = bench_loop(args.repeats, args.compile)
    summary = summarise(times, "minimal loop")
    print("| whole runs (batch 1, 32-token prompt, 128 new tokens) | ms/token | ratio to minimal loop | middle half |")
    print("|---|---|---|---|")
    for name, (seconds, ratio, q1, q3) in summary.items():
        print(f"| {name} | {seconds / 128 * 1e3:.3f} | {ratio:.3f}x | {q1:.3f}x – {q3:.3f}x |")
    print()
    base_step = statistics.median(steps["minimal loop"])
    print("| one decode step (median of every step of every round) | ms | ratio to minimal loop |")
    print("|---|---|---|")
    for name, seconds_per_step in steps.items():
        step = statistics.median(seconds_per_step)
        print(f"| {name} | {step * 1e3:.3f} | {step / base_step:.3f}x |")
    at20, at2000 = bench_cache_append(args.repeats)
    print()
    print("| dense cache append, 12 layers | µs | ratio |")
    print("|---|---|---|")
    print(f"| at position 20 | {at20 * 1e6:.1f} | 1.000x |")
    print(f"| at position 2,000 | {at2000 * 1e6:.1f} | {at2000 / at20:.3f}x |")


if __name__ == "__main__":
    main()

"""A decode step on a realistic model: GPT-2 small's shape (12 layers, 768 dims, 12 heads,
V = 50,257, random weights), batch 1, a 32-token prompt. The yardstick of issue 11's rule: a
piece of the hot path stays only if it saves at least 10% of this step.

Per case, the median decode step (`bench_generate.StepClock`: from one forward's start to the
next's), the cases interleaved round by round, each round's ratio to the minimal loop (forward +
argmax). Run it on two checkouts (`PYTHONPATH=<old>/core:<old>/plugins/*/src`) to compare code.
Also, in this process: the output projection `[1, 768] x [768, 50257]` as `lm_head` computes it
(the weight row-major, [V, C]) and against a column-major copy (what the reference GPT cached
before), each as a share of the step.

    python benchmarks/bench_gpt2_step.py [--rounds 3] [--new-tokens 24] [--threads 1] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bench_generate import StepClock, minimal_step_times
from decodekit_gpt.gpt import GPT, GPTConfig

import decodekit as dk

CHAINS = {
    "dk greedy": "greedy",
    "dk temperature, sample": "temperature(0.8) | sample",
    "dk top_k, top_p, sample": "top_k(50) | top_p(0.9) | sample",
    "dk full chain": "repetition_penalty(1.1) | temperature(0.8) | top_k(50) | top_p(0.9) | sample",
}


def dk_steps(model: GPT, prompt: torch.Tensor, chain: str, new: int, **options: object) -> list[float]:
    clock = StepClock(model)
    dk.generate(clock, prompt, chain=chain, max_new_tokens=new, seed=0, **options)  # type: ignore[arg-type]
    return clock.decode_steps()


def projection_ms(model: GPT, repeats: int = 30) -> tuple[float, float]:
    """Median ms of the output projection of one row: row-major weight (`F.linear`), column-major copy."""
    w = model.lm_head.weight.detach()
    w_t = w.t().contiguous()
    x = torch.randn(1, 1, w.shape[1])
    out = {}
    variants: dict[str, Callable[[], torch.Tensor]] = {"row": lambda: F.linear(x, w), "col": lambda: x @ w_t}
    for name, fn in variants.items():
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1e3
    return out["row"], out["col"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also time dk.generate(..., compile=True)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=12, n_head=12, n_embd=768, vocab_size=50257)).eval()
    prompt = torch.randint(0, 50257, (1, 32))
    new = args.new_tokens
    cases: dict[str, Callable[[], list[float]]] = {"minimal loop": lambda: minimal_step_times(model, prompt, new)}
    for name, text in CHAINS.items():
        cases[name] = lambda text=text: dk_steps(model, prompt, text, new)  # type: ignore[misc]
        if args.compile:
            cases[name + " [compile]"] = lambda text=text: dk_steps(model, prompt, text, new, compile=True)  # type: ignore[misc]
    steps: dict[str, list[float]] = {name: [] for name in cases}
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    with torch.inference_mode():
        for fn in cases.values():
            fn()  # warm-up (and the first compilations)
        names = list(cases)
        for r in range(args.rounds):
            medians = {}
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times = cases[name]()
                steps[name] += times
                medians[name] = statistics.median(times)
            for name in names:
                ratios[name].append(medians[name] / medians["minimal loop"])
        row, col = projection_ms(model)
    base = statistics.median(steps["minimal loop"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.rounds} rounds of {new} tokens")
    print("| GPT-2 small, one decode step | ms | ratio to minimal loop (median of rounds) |")
    print("|---|---:|---:|")
    for name in cases:
        print(f"| {name} | {statistics.median(steps[name]) * 1e3:.2f} | {statistics.median(ratios[name]):.3f}x |")
    print()
    print("| output projection [1, 768] x [768, 50257] | ms | share of the minimal step |")
    print("|---|---:|---:|")
    print(f"| row-major weight (lm_head) | {row:.2f} | {row / (base * 1e3):.1%} |")
    print(f"| column-major copy | {col:.2f} | {col / (base * 1e3):.1%} |")


if __name__ == "__main__":
    main()

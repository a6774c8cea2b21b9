"""Two checkouts' per-token cost, interleaved A/B: each venv's python, a fresh process per measurement.

    python benchmarks/bench_ab.py OLD_VENV NEW_VENV [--rounds 3] [--cases gen-b1 chain-b8 ...] [--counts]

OLD_VENV, NEW_VENV: a checkout's virtual environment (`make install-dev` makes `.venv`), or its python. Every
round runs each case once in each (the order alternating by round), `nice`d, on one torch thread. A
measurement is the least CPU time of a few calls, per token (per call for a `chain-*` case), after a warm-up
in its process: `time.thread_time` counts the thread's own time, not the time other jobs take on a shared
machine. Reported: each side's median over rounds with its spread (min..max around the median), new/old,
and the spread of the rounds' own ratios. `--counts`: instead of times, the calls a token makes in each checkout,
which no load disturbs (the eager `gen-*` cases: Python calls as cProfile counts them, torch calls as a
`TorchFunctionMode` sees them, attribute reads such as `.dtype` included).

Cases: `dk.generate` on tiny-shakespeare (`gen-*`: batch 1 or 8, 128 tokens, `temperature(0.8) | top_p(0.95) |
sample` or greedy, eager or `compile=True`); a 200-token prompt's prefill at batch 8 (`prefill-b8`,
`prompt_logprobs` unset); one `Chain.step` on `[B, 50257]` Zipf-like logits (`chain-*`, as
benchmarks/bench_chain.py); a GPT-2-small-sized random transformers model through decodekit-hf at batch 1,
32 tokens (`hf-gpt2-b1`, as benchmarks/bench_hf.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHAIN = "temperature(0.8) | top_p(0.95) | sample"
# name -> (kind, batch, chain, compile, new tokens, timed calls)
CASES: dict[str, tuple[str, int, str, bool, int, int]] = {
    "gen-b1": ("gen", 1, CHAIN, False, 128, 4),
    "gen-b8": ("gen", 8, CHAIN, False, 128, 3),
    "gen-b1-greedy": ("gen", 1, "greedy", False, 128, 4),
    "gen-b8-greedy": ("gen", 8, "greedy", False, 128, 3),
    "gen-b1-compile": ("gen", 1, CHAIN, True, 128, 4),
    "gen-b8-compile": ("gen", 8, CHAIN, True, 128, 3),
    "gen-b1-greedy-compile": ("gen", 1, "greedy", True, 128, 4),
    "gen-b8-greedy-compile": ("gen", 8, "greedy", True, 128, 3),
    "prefill-b8": ("prefill", 8, CHAIN, False, 1, 9),
    "chain-b1": ("chain", 1, CHAIN, False, 0, 400),
    "chain-b8": ("chain", 8, CHAIN, False, 0, 200),
    "chain-b1-greedy": ("chain", 1, "greedy", False, 0, 400),
    "hf-gpt2-b1": ("hf", 1, CHAIN, False, 32, 1),
}
PROMPTS = ["ROMEO:", "JULIET:", "HAMLET:", "KING:", "Q:", "A", "First Citizen:", "LEAR:"]
# glibc keeps freed buffers (README): else a process may fault every step's [B, V] tensors in afresh, and which
# process does is chance (a batch-8 chain step took 1.0 or 2.1 ms by process), not the code under test
ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "1073741824"}


def case_call(name: str, new: int | None = None) -> tuple[Callable[[], object], int]:
    """Case `name` as one call, and the tokens (or steps) it makes; `new` tokens instead of the case's."""
    import torch

    import decodekit as dk

    kind, batch, chain, compile, default, _ = CASES[name]
    new = default if new is None else new
    if kind == "chain":
        from decodekit.context import row_generators

        g, V = torch.Generator().manual_seed(0), 50257
        base = -1.2 * torch.log(torch.arange(1, V + 1, dtype=torch.float32))
        rows = [base[torch.randperm(V, generator=g)] + 0.1 * torch.randn(V, generator=g) for _ in range(batch)]
        x = torch.stack(rows)
        ctx = dk.DecodeContext(
            tokens=torch.randint(0, V, (batch, 160), generator=g), step=80, generators=row_generators(0, batch)
        )
        steps = dk.Chain.parse(chain)
        return lambda: steps.step(x, ctx), 1
    model: Any
    prompts: Any
    if kind == "hf":
        from decodekit_hf.model import HFModel
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        config = GPT2Config(vocab_size=50257, n_layer=12, n_embd=768, n_head=12)
        model = HFModel(GPT2LMHeadModel(config).eval())  # type: ignore[no-untyped-call]
        prompts = torch.randint(0, 50257, (batch, 32), generator=torch.Generator().manual_seed(batch))
    else:
        model = dk.load_model("tiny-shakespeare")
        if kind == "prefill":
            prompts = [model.tokenizer.encode("ROMEO:\nWhat light through yonder window breaks? " * 4)[:200]] * batch
        else:
            prompts = PROMPTS[:batch]
    return lambda: dk.generate(model, prompts, chain=chain, max_new_tokens=new, seed=0, compile=compile), new


def measure(name: str) -> float:
    """Least CPU seconds per token (per call for a chain case) of case `name`, in this process."""
    import torch

    torch.set_num_threads(1)
    call, per = case_call(name)
    calls = CASES[name][5]
    times = []
    with torch.inference_mode():
        for _ in range(3 if CASES[name][3] else 1):  # warm-up (and compile)
            call()
        for _ in range(calls):
            start = time.thread_time()
            call()
            times.append((time.thread_time() - start) / per)
    return min(times)


def count(name: str) -> tuple[float, float]:
    """Python and torch calls per token of case `name`: a run of its length less one of half, so the fixed costs
    (loading, the prefill) cancel."""
    import cProfile

    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    def calls(new: int) -> tuple[int, int]:
        call, _ = case_call(name, new)
        call()  # warm-up: first calls import and cache
        profile = cProfile.Profile()
        profile.runcall(call)
        Counting.calls = 0
        with Counting():
            call()
        # each function's own count: pstats keys by (file, line, name), where every NamedTuple's __new__ is
        # <string>:1(<lambda>), and keeps the last of those counts, so a count moved with which came last
        return sum(entry.callcount for entry in profile.getstats()), Counting.calls

    new = CASES[name][4]
    (py_half, torch_half), (py_all, torch_all) = calls(new // 2), calls(new)
    return (py_all - py_half) / (new - new // 2), (torch_all - torch_half) / (new - new // 2)


def compare_counts(sides: dict[str, str], cases: list[str]) -> None:
    """Each eager `gen-*` case's calls per token in both checkouts, once: the counts do not vary by run."""
    print(f"{'case':22} {'python old':>11} {'new':>7} {'torch old':>10} {'new':>7}")
    for case in [c for c in cases if CASES[c][0] == "gen" and not CASES[c][3]]:
        got = {}
        for side, python in sides.items():
            out = subprocess.run([python, os.path.abspath(__file__), "--count", case], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{side} {case}: {out.stderr[-2000:]}")
            got[side] = json.loads(out.stdout.strip().splitlines()[-1])
        (po, to), (pn, tn) = got["old"], got["new"]
        print(f"{case:22} {po:11.1f} {pn:7.1f} {to:10.1f} {tn:7.1f}")


def python_of(venv: str) -> str:
    """A venv's python, or the python given."""
    path = Path(venv)
    return str(path / "bin" / "python") if path.is_dir() else venv


def spread(xs: list[float]) -> str:
    m = statistics.median(xs)
    return f"{(min(xs) / m - 1) * 100:+.0f}..{(max(xs) / m - 1) * 100:+.0f}%"


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        print(json.dumps(measure(sys.argv[2])))
        return
    if sys.argv[1:2] == ["--count"]:
        print(json.dumps(count(sys.argv[2])))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--counts", action="store_true", help="calls per token instead of times")
    args = parser.parse_args()
    sides = {"old": python_of(args.old), "new": python_of(args.new)}
    if args.counts:
        compare_counts(sides, args.cases)
        return
    t: dict[str, dict[str, list[float]]] = {c: {"old": [], "new": []} for c in args.cases}
    for r in range(args.rounds):
        for case in args.cases:
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                command = ["nice", sides[side], os.path.abspath(__file__), "--worker", case]
                out = subprocess.run(command, capture_output=True, text=True, env=ENV)
                if out.returncode:
                    sys.exit(f"{side} {case}: {out.stderr[-2000:]}")
                t[case][side].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(json.dumps([r, case, side, t[case][side][-1]]), file=sys.stderr, flush=True)
    print(f"{'case':22} {'old us':>9} {'spread':>10} {'new us':>9} {'spread':>10} {'new/old':>8} {'rounds':>14}")
    for case in args.cases:
        old, new = t[case]["old"], t[case]["new"]
        ratios = [n / o for n, o in zip(new, old)]
        mo, mn = statistics.median(old), statistics.median(new)
        print(
            f"{case:22} {mo * 1e6:9.1f} {spread(old):>10} {mn * 1e6:9.1f} {spread(new):>10} {mn / mo:8.3f}"
            f" {min(ratios):6.3f}..{max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()

"""Long generations under a bounded cache: does a token cost the same at step 8,000 as at step 300?

For each cache (`--caches`: `window` and a scored cache) and each case, one row of `--tokens` new tokens from
tiny-shakespeare, timed step by step: the median time between two forwards of the model over tokens
`--early` (256-512) and over the last 256, their ratio late/early (1.0: a flat cost per token), and the process's
resident memory growth between those two points (a bounded cache: near 0; its `nbytes` is fixed). Cases:

- `greedy`, `sample` (the default chain), `penalties` (`repetition_penalty`, `presence_penalty`,
  `frequency_penalty`, `dry`, `no_repeat_ngram` before the default chain), `stop` (stop strings that never
  occur), `logprobs` (5 a token), `grammar` (a `regex` any text of the model's matches): `dk.stream`, as a
  program calls it;
- `cli`: `decodekit generate ... --max-new-tokens N --cache C` streaming its text to stdout (a file here), and
  `batch`: one line through a batch job (`--input F --output G`), both run in this process, as the command runs.

Every interval is the time from one forward of the model to the next (a global forward pre-hook stamps each call
of the model), so it holds the model, the chain, the text and whatever the caller does with a token. The figures
are ratios within one run: early and late steps share the machine's load only roughly, so each case runs
`--repeats` times and the median ratio is reported.

    python benchmarks/bench_long.py [--tokens 8192] [--caches "window(size=128)" "h2o(budget=128, recent=32)"]
                                    [--cases greedy sample ...] [--repeats 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import decodekit as dk

MODEL = "tiny-shakespeare"
CACHES = ("window(size=128)", "h2o(budget=128, recent=32)")
PENALTIES = (
    "repetition_penalty(1.1) | presence_penalty(0.3) | frequency_penalty(0.3) | dry(0.8) | no_repeat_ngram(6)"
    " | temperature(0.8) | top_p(0.95)"
)
GRAMMAR = 'regex(pattern="[A-Za-z ,.;:!?\'\\n-]*") | temperature(0.8) | top_p(0.95)'  # any of its text: never ends
NEVER = ["<<never>>", "QQQQ", "\n\n\n\n\n"]  # stop strings this model does not write: the check runs every step
API_CASES: dict[str, dict[str, Any]] = {
    "greedy": {"chain": "greedy"},
    "sample": {},
    "penalties": {"chain": PENALTIES},
    "stop": {"stop_strings": NEVER},
    "logprobs": {"logprobs": 5},
    "grammar": {"chain": GRAMMAR},
}
CASES = (*API_CASES, "cli", "batch")
LATE = 256


def rss_mb() -> float:
    """This process's resident memory now (not its peak), in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Stamps:
    """The times of the model's forwards (a global pre-hook on every module: kept when the module has a `spec`,
    as a decodekit model has), and the resident memory at two of them."""

    def __init__(self, marks: tuple[int, int]) -> None:
        self.times: list[float] = []
        self.marks = marks
        self.rss: dict[int, float] = {}

    def __call__(self, module: torch.nn.Module, args: Any) -> None:
        if getattr(module, "spec", None) is not None and hasattr(module.spec, "vocab_size"):
            self.times.append(time.perf_counter())
            if len(self.times) in self.marks:
                self.rss[len(self.times)] = rss_mb()

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stamps]:
        handle = torch.nn.modules.module.register_module_forward_pre_hook(self)
        try:
            yield self
        finally:
            handle.remove()


def run_api(model: Any, cache: str, tokens: int, options: dict[str, Any]) -> None:
    for _ in dk.stream(model, "ROMEO:", cache=cache, max_new_tokens=tokens, seed=0, **options):
        pass


def run_cli(argv: list[str]) -> None:
    from decodekit_cli.app import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = run(argv)
    if status != 0:
        raise SystemExit(f"decodekit {' '.join(argv)}: exit status {status}")


def cli_argv(model: str, cache: str, tokens: int) -> list[str]:
    options = ["--model", model, "--max-new-tokens", str(tokens), "--cache", cache, "--seed", "0", "--ignore-eos"]
    return ["generate", "ROMEO:", *options]


def batch_argv(model: str, cache: str, tokens: int, folder: Path) -> list[str]:
    source, target = folder / "in.jsonl", folder / "out.jsonl"
    source.write_text(json.dumps({"prompt": "ROMEO:"}) + "\n")
    target.unlink(missing_ok=True)
    return ["generate", *cli_argv(model, cache, tokens)[2:], "--input", str(source), "--output", str(target)]


def measure(work: Callable[[], None], tokens: int, early: tuple[int, int]) -> dict[str, float]:
    """Run `work` (one decode of `tokens` new tokens) and read its step times and memory."""
    stamps = Stamps((early[1], tokens))
    with stamps.installed():
        work()
    steps = [b - a for a, b in zip(stamps.times, stamps.times[1:])]  # steps[i]: from forward i to forward i+1
    if len(steps) < tokens - 1:
        raise SystemExit(f"only {len(steps) + 1} forwards for {tokens} tokens: the decode ended early")
    first = statistics.median(steps[early[0] : early[1]]) * 1e3
    last = statistics.median(steps[-LATE:]) * 1e3
    grown = stamps.rss.get(tokens, float("nan")) - stamps.rss.get(early[1], float("nan"))
    return {"early_ms": first, "late_ms": last, "ratio": last / first, "rss_growth_mb": grown}


def case_work(case: str, name: str, model: Any, cache: str, tokens: int, folder: Path) -> Callable[[], None]:
    if case in API_CASES:
        return lambda: run_api(model, cache, tokens, API_CASES[case])
    if case == "cli":
        return lambda: run_cli(cli_argv(name, cache, tokens))
    return lambda: run_cli(batch_argv(name, cache, tokens, folder))


def cache_bytes(model: Any, cache: str, tokens: int) -> int:
    spec = dk.CacheSpec.for_model(model.spec, batch_size=1, capacity=tokens + 8)
    return int(dk.create_cache(cache, spec).nbytes)  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--caches", nargs="+", default=list(CACHES))
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--early", type=int, nargs=2, default=(256, 512), help="the early window of steps")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = dk.load_model(args.model)
    early = (args.early[0], args.early[1])
    results: list[dict[str, Any]] = []
    print(
        f"{args.model}, {args.tokens:,} new tokens, one row, {args.threads} thread(s); ms/step median over steps "
        f"{early[0]}-{early[1]} and the last {LATE}; ratio late/early (1.0: flat), RSS growth between them"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for cache in args.caches:
            print(f"{cache}: {cache_bytes(model, cache, args.tokens):,} bytes, fixed")
            for case in args.cases:
                work = case_work(case, args.model, model, cache, args.tokens, Path(tmp))
                results.append({"cache": cache, "case": case, **repeated(work, args.tokens, early, args.repeats)})
                show(results[-1])
                if args.json is not None:
                    args.json.write_text(json.dumps(results, indent=1))
    sys.stdout.flush()


def repeated(work: Callable[[], None], tokens: int, early: tuple[int, int], repeats: int) -> dict[str, float]:
    """`measure` `repeats` times: the median of each figure."""
    runs = [measure(work, tokens, early) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def show(row: dict[str, Any]) -> None:
    print(
        f"  {row['case']:<10} {row['early_ms']:7.3f} -> {row['late_ms']:7.3f} ms/step   ratio {row['ratio']:5.2f}   "
        f"RSS +{row['rss_growth_mb']:.1f} MB",
        flush=True,
    )


if __name__ == "__main__":
    main()

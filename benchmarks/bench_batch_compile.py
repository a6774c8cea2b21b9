"""The batch job (`decodekit generate --input --output`) eager and with `--compile`, in one process.

`--prompts` speaker prompts drawn at random (6-14 characters: batches of other widths) of `--tokens` new tokens,
`--batch-size` rows at a time, with tiny-shakespeare: the job eager, then with `--compile` (its first run
compiles), then again both, `--rounds` times. Reports the graphs dynamo compiled (the first compiled run
compiles them all: a later one none) and each run's time as a ratio of the eager job's (the machine may be
shared: ratios, not seconds), and checks that every record equals the eager job's.

    python benchmarks/bench_batch_compile.py [--prompts 42] [--tokens 64] [--batch-size 8] [--rounds 2] [--cold]

--cold: a new, empty inductor cache (`TORCHINDUCTOR_CACHE_DIR`), so the first compiled run compiles
every kernel; without it, kernels already in the cache are reused and only dynamo traces again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

SPEAKERS = ["ROMEO:", "JULIET:", "HAMLET:", "OPHELIA:", "KING LEAR:", "MACBETH:", "FIRST CITIZEN:", "IAGO:"]


def run_job(inputs: Path, out: Path, args: list[str]) -> tuple[float, list[object]]:
    """The job's seconds and its records, in line order."""
    from decodekit_cli import main

    out.unlink(missing_ok=True)
    Path(f"{out}.settings.json").unlink(missing_ok=True)
    start = time.perf_counter()
    assert main(["generate", "--input", str(inputs), "--output", str(out), *args]) == 0
    seconds = time.perf_counter() - start
    return seconds, sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["line"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=42)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cold", action="store_true", help="an empty inductor cache")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_batch_compile_"))
    if a.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")  # before torch is imported
    import torch._dynamo.utils

    inputs = work / "prompts.jsonl"
    speakers = random.Random(0).choices(SPEAKERS, k=a.prompts)
    inputs.write_text("".join(json.dumps({"prompt": speaker}) + "\n" for speaker in speakers))
    args = ["--max-new-tokens", str(a.tokens), "--seed", "0", "--batch-size", str(a.batch_size)]
    eager_s, eager = run_job(inputs, work / "eager.jsonl", args)
    torch._dynamo.utils.counters.clear()
    first_s, records = run_job(inputs, work / "compiled.jsonl", [*args, "--compile"])
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert records == eager, "the compiled job's records differ from the eager job's"
    eagers, compiled = [eager_s], []
    for _ in range(a.rounds):
        seconds, records = run_job(inputs, work / "compiled.jsonl", [*args, "--compile"])
        assert records == eager, "the compiled job's records differ from the eager job's"
        compiled.append(seconds)
        eagers.append(run_job(inputs, work / "eager.jsonl", args)[0])
    again = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs
    batches = -(-a.prompts // a.batch_size)
    base = statistics.median(eagers)
    print(f"{a.prompts} prompts x {a.tokens} tokens, batch size {a.batch_size} ({batches} batches)")
    print(f"graphs compiled: {graphs} by the first compiled job, {again} by the {a.rounds} after it")
    print(f"compiled / eager, first compiled job (compiling): {first_s / base:.2f}x")
    print(f"compiled / eager, later jobs (median of {a.rounds}): {statistics.median(compiled) / base:.2f}x")
    print("records: equal to the eager job's")


if __name__ == "__main__":
    main()

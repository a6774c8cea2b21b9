"""Batch generation: the local job against the same job on Ray Data with 1 and 2 actors.

400 prompts x 64 new tokens with tiny-shakespeare, one torch thread per process or actor (the
default for a model this small), run as a user runs them: `decodekit generate --input --output`,
and the same on Ray with `--ray-actors 1|2`, on

- a warm cluster: `--ray ADDRESS`, a Ray cluster of 2 CPUs on the loopback that this script starts
  before the timed runs and stops after (as `ray start --head` does for a real cluster, which
  outlives its jobs), and
- a cold one: `--ray` alone, the command starting a Ray of this machine's CPUs and stopping it.

The five configurations run in rotation, `--rounds` times; for each, the median of

- the whole command's wall time (start-up, model load, the check of every line, writing), and
- its steady rate: prompts per second between 10% and 90% of the records written, read from
  outside (the output's lines for the local job, the rows of the Ray job's complete parts), so
  start-up and the last stragglers are left out the same way on both sides.

The outputs of all five must be byte-identical (the script fails otherwise). The targets: Ray with
2 actors >= 1.6x Ray with 1, Ray with 1 >= 0.8x the local job.

    nice python benchmarks/bench_batch.py [--rounds 3] [--batch-size 8] [--prompts 400] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import ray

SPEAKERS = ["ROMEO:", "JULIET:", "HAMLET:", "OPHELIA:", "KING LEAR:", "MACBETH:", "PORTIA:", "IAGO:"]
WARM = "ADDRESS"  # in a configuration's arguments: the warm cluster's address
CONFIGS = {
    "local": [],
    "ray warm, 1 actor": ["--ray", WARM, "--ray-actors", "1"],
    "ray warm, 2 actors": ["--ray", WARM, "--ray-actors", "2"],
    "ray cold, 1 actor": ["--ray", "--ray-actors", "1"],
    "ray cold, 2 actors": ["--ray", "--ray-actors", "2"],
}
RATIOS = [  # (faster, slower, target)
    ("ray warm, 2 actors", "ray warm, 1 actor", 1.6),
    ("ray warm, 1 actor", "local", 0.8),
    ("ray cold, 2 actors", "ray cold, 1 actor", 1.6),
    ("ray cold, 1 actor", "local", 0.8),
]


class Run(NamedTuple):
    wall: float  # seconds, the whole command
    steady: float  # prompts per second between 10% and 90% done
    output: bytes


def _prompts(path: Path, count: int) -> Path:
    lines = [json.dumps({"prompt": f"{SPEAKERS[i % len(SPEAKERS)]}\n" + "Thou " * (i % 5)}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _local_done(out: Path) -> Callable[[], int]:
    return lambda: out.read_bytes().count(b"\n") if out.exists() else 0


def _ray_done(out: Path) -> Callable[[], int]:
    parts = out.with_name(out.name + ".parts")
    counted: dict[str, int] = {}  # each complete part read once: the poll must not take the actors' CPU

    def rows() -> int:
        for path in parts.glob("*.parquet") if parts.exists() else ():
            if path.name not in counted:
                try:
                    counted[path.name] = pq.read_metadata(path).num_rows
                except (OSError, pa.ArrowException):  # still being written
                    continue
        return sum(counted.values())

    return rows


def _run(command: list[str], out: Path, done: Callable[[], int], count: int) -> Run:
    """Run the command, polling how many records are done; its wall time and steady rate."""
    start = time.perf_counter()
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marks: dict[float, float] = {}
    while job.poll() is None:
        finished = done()
        for fraction in (0.1, 0.9):
            if fraction not in marks and finished >= fraction * count:
                marks[fraction] = time.perf_counter()
        time.sleep(0.05)
    wall = time.perf_counter() - start
    _, err = job.communicate()
    if job.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{err}")
    steady = 0.8 * count / (marks[0.9] - marks[0.1]) if len(marks) == 2 and marks[0.9] > marks[0.1] else float("nan")
    return Run(wall, steady, out.read_bytes())


def _start_cluster() -> str:
    """A Ray cluster of 2 CPUs on this machine; its address (RAY_AUTH_MODE is set for the jobs too)."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    address: str = ray.get_runtime_context().gcs_address
    return address


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=400)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    address = _start_cluster()
    cli = [sys.executable, "-m", "decodekit_cli", "generate"]
    options = ["-m", "tiny-shakespeare", "--seed", "0", "--max-new-tokens", str(args.tokens)]
    options += ["--batch-size", str(args.batch_size)]
    runs: dict[str, list[Run]] = {name: [] for name in CONFIGS}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        prompts = _prompts(Path(tmp) / "prompts.jsonl", args.prompts)
        for round_ in range(args.rounds):
            for name, extra in CONFIGS.items():
                out = Path(tmp) / f"{round_}-{name.replace(' ', '').replace(',', '-')}.jsonl"
                ray_args = [address if arg == WARM else arg for arg in extra]
                command = [*cli, "--input", str(prompts), "--output", str(out), *options, *ray_args]
                done = _ray_done(out) if extra else _local_done(out)
                runs[name].append(_run(command, out, done, args.prompts))
                load.append(os.getloadavg()[0])
                print(f"round {round_ + 1} {name}: {runs[name][-1].wall:.1f} s", file=sys.stderr, flush=True)
    ray.shutdown()

    outputs = {run.output for name in runs for run in runs[name]}
    assert len(outputs) == 1, "the outputs differ between the local job and Ray"
    wall = {name: statistics.median(r.wall for r in rs) for name, rs in runs.items()}
    steady = {name: statistics.median(r.steady for r in rs) for name, rs in runs.items()}
    tokens = args.prompts * args.tokens
    print(
        f"{args.prompts} prompts x {args.tokens} tokens, tiny-shakespeare, batch size {args.batch_size}, "
        f"median of {args.rounds} rounds; load average {min(load):.1f}-{max(load):.1f} on {os.cpu_count()} CPUs"
    )
    print()
    print("| job | wall s | prompts/s (whole) | tokens/s (whole) | prompts/s (10-90%) |")
    print("|---|---:|---:|---:|---:|")
    for name in CONFIGS:
        print(
            f"| {name} | {wall[name]:.1f} | {args.prompts / wall[name]:.1f} | {tokens / wall[name]:,.0f} | "
            f"{steady[name]:.1f} |"
        )
    print()
    print("| ratio | whole command | steady (10-90%) | target |")
    print("|---|---:|---:|---:|")
    for faster, slower, target in RATIOS:
        print(
            f"| {faster} / {slower} | {wall[slower] / wall[faster]:.2f}x | {steady[faster] / steady[slower]:.2f}x | "
            f">= {target}x |"
        )
    print()
    print(f"outputs byte-identical: {len(outputs) == 1} ({len(next(iter(outputs)).splitlines())} records)")


if __name__ == "__main__":
    main()

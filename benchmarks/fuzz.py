"""`make fuzz`: run 10,000+ fuzz cases and print how many ended in each outcome class.

    python benchmarks/fuzz.py --cases 10000 --seed 0 [--targets chains specs generate] [--samplers a b]
                              [--examples] [--json outcomes.json]

Every case runs to its end: a failure is counted and the run goes on (see decodekit.testing.fuzz).
Exit status 1 when any case failed (an outcome other than ok or a decodekit error).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from decodekit.errors import PluginError, UnknownNameError
from decodekit.testing.fuzz import ACCEPTED, TARGETS, Tally, fuzz, registered_samplers

_WIDTH = 100


def _print(tally: Tally, examples: bool) -> None:
    total = sum(tally.cases.values())
    shares = ", ".join(f"{t} {n}" for t, n in tally.cases.items())
    print(f"{total} cases ({shares}) in {tally.seconds:.0f} s\n")
    print(f"{'class / detail':<{_WIDTH - 8}}{'cases':>8}")
    for kind, n in sorted(tally.classes.items(), key=lambda kv: (kv[0] not in ACCEPTED, -kv[1])):
        print(f"{kind:<{_WIDTH - 8}}{n:>8}")
        details = sorted(
            ((f, c) for f, c in tally.outcomes.items() if f.kind == kind and f.detail), key=lambda x: -x[1]
        )
        for finding, c in details:
            line = f"  {finding.detail}"[: _WIDTH - 9]
            print(f"{line:<{_WIDTH - 8}}{c:>8}")
            if kind not in ACCEPTED and finding in tally.samplers:
                common = ", ".join(f"{s} {m}" for s, m in tally.samplers[finding].most_common(3))
                if common:
                    print(f"      samplers in those cases: {common}")
            if examples and kind not in ACCEPTED:
                print(f"      e.g. {tally.examples[finding][:400]}")


def _dump(tally: Tally, path: Path) -> None:
    rows = [
        {"kind": f.kind, "detail": f.detail, "cases": n, "example": tally.examples[f],
         "samplers": dict(tally.samplers.get(f, {}))}
        for f, n in tally.outcomes.most_common()
    ]  # fmt: skip
    path.write_text(
        json.dumps({"cases": dict(tally.cases), "classes": dict(tally.classes), "outcomes": rows}, indent=1)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", nargs="+", choices=sorted(TARGETS), default=list(TARGETS))
    parser.add_argument("--examples", action="store_true", help="print the shortest case of each failure")
    parser.add_argument("--json", type=Path, help="also write every outcome, with an example, to this file")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds one case may run")
    parser.add_argument("--samplers", nargs="+", help="fuzz only these registered samplers (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and kind to a shared machine
    try:
        samplers = registered_samplers(tuple(args.samplers)) if args.samplers else None
    except (UnknownNameError, PluginError) as exc:  # a name nothing registers, or two plugins do
        parser.error(f"--samplers: {exc}")
    tally = fuzz(args.cases, seed=args.seed, targets=args.targets, samplers=samplers, timeout=args.timeout)
    _print(tally, args.examples)
    if args.json:
        _dump(tally, args.json)
    return 1 if any(kind not in ACCEPTED for kind in tally.classes) else 0


if __name__ == "__main__":
    sys.exit(main())

"""top_p's own time, this checkout against an older commit's copy, side by side in one process.

Both `TopP` stages (and the old `top_candidates`) run on the same logits in interleaved rounds, CPU time
per call, medians; `to_candidates` is the chain's path, `__call__` the dense one. Logits as after
temperature(0.8): N(0, 3) at V = 84 (tiny-shakespeare), bench_chain's peaked rows at V = 50,257.

    python plugins/decodekit-top-p/bench_nucleus.py OLD_REV [--compile]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from bench_chain import peaked_logits
from decodekit_top_p import top_p as new_top_p
from decodekit_top_p.params import TopPParams
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parents[1]


def old_module(rev: str) -> Any:
    """The old commit's top_p, importing the old commit's `top_candidates`."""
    tmp = Path(tempfile.mkdtemp())

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
        ).stdout

    (tmp / "old_candidates.py").write_text(show("core/decodekit/candidates.py"))
    top_p = show("plugins/decodekit-top-p/src/decodekit_top_p/top_p.py")
    (tmp / "old_top_p.py").write_text(top_p.replace("from decodekit.candidates import", "from old_candidates import"))
    sys.path.insert(0, str(tmp))
    import old_top_p  # type: ignore[import-not-found]

    return old_top_p


class Count(TorchFunctionMode):
    n = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        Count.n += 1
        return func(*args, **(kwargs or {}))


def calls(fn: Any, x: torch.Tensor) -> int:
    Count.n = 0
    with Count():
        fn(x, None)
    return Count.n


def per_call(fn: Any, x: torch.Tensor, n: int = 200) -> float:
    t = time.process_time()
    for _ in range(n):
        fn(x, None)
    return (time.process_time() - t) / n * 1e6


def main() -> None:
    old_top_p, compiled = old_module(sys.argv[1]), "--compile" in sys.argv
    torch.set_num_threads(1)
    with torch.inference_mode():
        for B, V in [(1, 84), (1, 50_257), (8, 50_257)]:
            g = torch.Generator().manual_seed(0)
            x = (peaked_logits(B) if V == 50_257 else torch.randn(B, V, generator=g) * 3) / 0.8
            for method in ["to_candidates", "__call__"]:
                fns = [getattr(m.TopP(TopPParams(p=0.95, min_keep=1)), method) for m in (old_top_p, new_top_p)]
                old, new = [torch.compile(f, dynamic=False) if compiled else f for f in fns]
                a, b = old(x, None), new(x, None)
                a, b = (
                    (a, b)
                    if method == "__call__"
                    else (torch.cat([a.values, a.indices]), torch.cat([b.values, b.indices]))
                )
                assert torch.equal(a.nan_to_num(), b.nan_to_num()) and torch.equal(a.isnan(), b.isnan())
                for _ in range(3):
                    per_call(old, x, 20), per_call(new, x, 20)
                rounds = [(per_call(old, x), per_call(new, x)) for _ in range(25)]
                mo, mn = (statistics.median(r) for r in zip(*rounds))
                count = "" if compiled else f"  calls {calls(old, x)} -> {calls(new, x)}"
                mode = "compiled" if compiled else "eager"
                print(
                    f"[{B}, {V}] {method:13s} {mode}: old {mo:7.1f} us  new {mn:7.1f} us  new/old {mn / mo:.3f}{count}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

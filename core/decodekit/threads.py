"""How many CPU threads a decode runs torch on: one for a small model, unless you chose.

A small model's per-token work is too small to split, and a second thread that waits for a busy core
stalls every step. So while it decodes a model of fewer than `SMALL_MODEL_PARAMETERS` parameters on
the CPU, decodekit runs torch on one thread, and gives your setting back between stream events and when
the decode ends. You choose instead by `DECODEKIT_THREADS=N` (0: leave torch's setting; at most
`usable_cpus`, as more crashes torch's OpenMP runtime), or by `torch.set_num_threads(n)` after importing
decodekit (a count other than torch's first one is your choice, and decodekit keeps it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator

import torch

from decodekit.by_identity import ByIdentity
from decodekit.errors import ParameterError

__all__ = ["SMALL_MODEL_PARAMETERS", "decode_threads", "threads", "usable_cpus"]

SMALL_MODEL_PARAMETERS = 20_000_000
_STARTED_WITH = torch.get_num_threads()
# Per model: the device of its first parameter when it was walked, and whether it was small and on the CPU.
_WALKED: ByIdentity[tuple[torch.device | None, bool]] = ByIdentity()


def decode_threads(model: object) -> int | None:
    """The threads to decode `model` on, or None to leave torch's setting (see the module docstring)."""
    if chosen := os.environ.get("DECODEKIT_THREADS", "").strip():
        cpus = usable_cpus()
        # ASCII digits only ("²".isdigit()), and few: int() refuses 4,300 digits
        n = int(chosen) if chosen.isascii() and chosen.isdigit() and len(chosen) < 10 else -1
        if not 0 <= n <= cpus:
            raise ParameterError(
                f"DECODEKIT_THREADS={chosen!r} is invalid; allowed: an integer 0 <= N <= {cpus}, the CPUs this "
                "process can use (0: torch's setting)"
            )
        return n or None
    if torch.get_num_threads() != _STARTED_WITH:
        return None  # the caller chose
    params = getattr(model, "parameters", None)
    return 1 if callable(params) and _small_on_cpu(model, params) else None


def _small_on_cpu(model: object, params: Callable[[], Iterator[torch.Tensor]]) -> bool:
    """Whether `model`'s parameters are all on the CPU and fewer than `SMALL_MODEL_PARAMETERS`: walked once per
    model and device of its first parameter (the walk took 0.26 ms a request on tiny-shakespeare), so a model
    moved whole (`model.to(device)`) is walked anew."""
    tensors = iter(params())
    first = next(tensors, None)
    device = None if first is None else first.device
    if (known := _WALKED.get(model)) is not None and known[0] == device:
        return known[1]
    small = _all_small_on_cpu(tensors if first is None else itertools.chain([first], tensors))
    _WALKED.put(model, (device, small))
    return small


def _all_small_on_cpu(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether `tensors` are all on the CPU and fewer than `SMALL_MODEL_PARAMETERS` in all: decided at the first
    tensor elsewhere or past the count (1.5 ms over a 32-layer Llama's 291)."""
    total = 0
    for p in tensors:
        total += p.numel()
        if p.device.type != "cpu" or total >= SMALL_MODEL_PARAMETERS:
            return False
    return True


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """torch on `n` threads inside the block (None: as it is), the caller's setting restored after."""
    # Read once: another thread's decode may set the count between two reads, and this one would then "restore"
    # that decode's count for good.
    before = torch.get_num_threads()
    if n is None or n == before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""Run fuzz cases and count their outcomes by class, rather than stopping at the first failure."""

from __future__ import annotations

import contextlib
import resource
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from decodekit.testing.fuzz.catalogue import SamplerInfo
from decodekit.testing.fuzz.chains import chain_cases, check_chain_case
from decodekit.testing.fuzz.compose import check_compose_case, compose_cases
from decodekit.testing.fuzz.generation import check_generate_case, generate_cases
from decodekit.testing.fuzz.outcomes import ACCEPTED, TIMEOUT, Finding, Report, exception_finding
from decodekit.testing.fuzz.rowlimits import check_row_limits_case, row_limits_cases
from decodekit.testing.fuzz.specs import check_spec_case, spec_cases

__all__ = ["TARGETS", "CaseTimeout", "Tally", "Target", "fuzz", "memory_limit", "run_case", "time_limit"]

_MEMORY_HEADROOM = 8 * 2**30  # address space a case may map beyond what the process maps already


@dataclass(frozen=True)
class Target:
    """What is fuzzed: `strategy(samplers)` draws cases, `check(case, report)` runs one."""

    strategy: Callable[[Sequence[SamplerInfo] | None], st.SearchStrategy[Any]]
    check: Callable[[Any, Report], None]
    weight: int  # its share of a run's cases


TARGETS: dict[str, Target] = {
    "chains": Target(chain_cases, check_chain_case, 6),
    "specs": Target(spec_cases, check_spec_case, 1),
    "generate": Target(generate_cases, check_generate_case, 3),
    "rowlimits": Target(row_limits_cases, check_row_limits_case, 1),
    "compose": Target(compose_cases, check_compose_case, 2),
}


class CaseTimeout(BaseException):  # not an Exception: code under test that catches those cannot swallow it
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `CaseTimeout` in this (the main) thread once `seconds` have passed inside the block."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise CaseTimeout(f"over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def memory_limit(headroom: int = _MEMORY_HEADROOM) -> Iterator[None]:
    """Cap the address space at what the process maps now plus `headroom` while fuzzing, so that an
    attempted huge allocation (`max_new_tokens=2**62`) fails at once instead of taking the machine down."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _mapped() + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _mapped() -> int:
    """Bytes of address space the process maps (Linux; elsewhere 0, and the cap is the headroom)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def run_case(target: Target, case: Any, timeout: float = 20.0) -> list[Finding]:
    """Every outcome of one case: findings, then the exception that ended it (if any), or `ok`."""
    report = Report()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with time_limit(timeout):
                target.check(case, report)
        except CaseTimeout:
            report.add(TIMEOUT, f"over {timeout:g} s")
        except Exception as exc:
            report.findings.append(exception_finding(exc))
    return report.outcomes()


@dataclass
class Tally:
    """Cases per target; per outcome, the cases that had it, the shortest one, and the samplers in them."""

    cases: Counter[str] = field(default_factory=Counter)
    classes: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[Finding] = field(default_factory=Counter)
    examples: dict[Finding, str] = field(default_factory=dict)
    samplers: dict[Finding, Counter[str]] = field(default_factory=dict)
    seconds: float = 0.0
    progress: int = 0  # print a line to stderr every this many cases (0: never)

    def add(self, target: str, case: Any, outcomes: list[Finding]) -> None:
        self.cases[target] += 1
        if self.progress and sum(self.cases.values()) % self.progress == 0:
            print(f"{sum(self.cases.values())} cases ...", file=sys.stderr, flush=True)
        text = f"{target}: {case!r}"
        names = set(getattr(case, "names", list)())
        self.classes.update({f.kind for f in outcomes})
        for finding in outcomes:
            self.outcomes[finding] += 1
            if finding not in self.examples or len(text) < len(self.examples[finding]):
                self.examples[finding] = text
            if finding.kind not in ACCEPTED:
                self.samplers.setdefault(finding, Counter()).update(names)


def fuzz(
    cases: int,
    *,
    seed: int = 0,
    targets: Sequence[str] = tuple(TARGETS),
    samplers: Sequence[SamplerInfo] | None = None,
    timeout: float = 20.0,
    progress: int = 1000,
) -> Tally:
    """Run about `cases` cases, shared among `targets` by weight, and count every outcome."""
    tally = Tally(progress=progress)
    start = time.perf_counter()
    total = sum(TARGETS[t].weight for t in targets)
    for name in targets:
        target = TARGETS[name]
        n = max(1, round(cases * target.weight / total))
        with memory_limit():
            _runner(name, target, n, seed, samplers, timeout, tally)()
    tally.seconds = time.perf_counter() - start
    return tally


def _runner(
    name: str, target: Target, n: int, seed: int, samplers: Sequence[SamplerInfo] | None, timeout: float, tally: Tally
) -> Callable[[], None]:
    """A hypothesis test of `n` cases of `target` that counts outcomes into `tally` and never fails."""

    @hypothesis_seed(seed)
    @settings(
        max_examples=n,
        database=None,
        phases=[Phase.generate],  # nothing fails here: every outcome is counted, none shrunk
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy(samplers))
    def one(case: Any) -> None:
        tally.add(name, case, run_case(target, case, timeout))

    return one  # type: ignore[no-any-return]

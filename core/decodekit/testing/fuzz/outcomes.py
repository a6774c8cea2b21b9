"""The outcome classes of a fuzz case, and how an exception or a broken property becomes one."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from types import TracebackType

from decodekit.errors import DecodekitError, PluginError

__all__ = [
    "ACCEPTED",
    "CACHE_MISMATCH",
    "CONTRACT",
    "DECODEKIT_ERROR",
    "INF_MADE",
    "MALFORMED",
    "MISMATCH",
    "MUTATED",
    "NAN_MADE",
    "OK",
    "OUT_OF_RANGE",
    "PLUGIN_BROKE",
    "REVIVED",
    "ROUND_TRIP",
    "ROW_MISMATCH",
    "SPEC_MISMATCH",
    "TIMEOUT",
    "UNFLAGGED",
    "UNTYPED",
    "Finding",
    "Report",
    "exception_finding",
]

OK = "ok"
DECODEKIT_ERROR = "decodekit error"  # raised on purpose: an accepted outcome
UNTYPED = "untyped exception"  # anything else escaping decodekit
PLUGIN_BROKE = "plugin error"  # a PluginError: a standard plugin broke its contract with decodekit
REVIVED = "revived token"  # -inf in a processor's input, not -inf in its output; or a removed token picked
UNFLAGGED = "unflagged unsampleable row"  # NaN, +inf or all-removed row, yet a token came back
OUT_OF_RANGE = "out-of-range token"  # a token id outside [0, V) (or -1 where marking is allowed)
MISMATCH = "fast-path mismatch"  # the candidates path differs from `chain.process`
MUTATED = "mutated input"  # the caller's logits or history changed
NAN_MADE = "NaN made"  # a processor turned a logit of a finite row into NaN
INF_MADE = "+inf made"  # a processor overflowed a finite row to +inf (the row can no longer be sampled)
CONTRACT = "contract"  # a processor changed shape or dtype, a selector returned a bad shape or dtype
ROUND_TRIP = "round-trip mismatch"  # to_spec/from_spec or str/parse does not rebuild the chain
ROW_MISMATCH = "row unlike alone"  # a prompt's row of a batch differs from the prompt decoded alone
CACHE_MISMATCH = "cache unlike dense"  # a cache keeping every token the text needs gave other tokens than `dense`
SPEC_MISMATCH = "strategy unlike reference"  # speculation unlike `sample`, beam(1) unlike greedy, or not repeatable
TIMEOUT = "timeout"  # a case ran past its time limit
MALFORMED = "malformed result"  # a Generation's logprobs or prompt_logprobs of the wrong length, rank or order

ACCEPTED = frozenset({OK, DECODEKIT_ERROR})
"""The outcomes that are not failures."""

_OWN_MODULE = __name__.rpartition(".")[0]  # decodekit.testing.fuzz: never blamed for a crash


@dataclass(frozen=True)
class Finding:
    """One outcome: its class, and a detail that groups like causes (an error type and where, a stage)."""

    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


@dataclass
class Report:
    """What one case found; no finding and no exception is `ok`."""

    findings: list[Finding] = field(default_factory=list)

    def add(self, kind: str, detail: str = "") -> None:
        finding = Finding(kind, detail)
        if finding not in self.findings:
            self.findings.append(finding)

    def outcomes(self) -> list[Finding]:
        return self.findings or [Finding(OK)]

    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.kind not in ACCEPTED]


def exception_finding(exc: BaseException) -> Finding:
    """`decodekit error: ParameterError`, `plugin error at module:function`, or `untyped exception: TypeError at
    module:function`."""
    if isinstance(exc, PluginError):  # raised on purpose, but at a plugin of this repository: a bug in it
        return Finding(PLUGIN_BROKE, f"at {blame(exc.__traceback__)}")
    if isinstance(exc, DecodekitError):
        return Finding(DECODEKIT_ERROR, type(exc).__name__)
    return Finding(UNTYPED, f"{type(exc).__name__} at {blame(exc.__traceback__)}")


def blame(tb: TracebackType | None) -> str:
    """The innermost frame of decodekit or a plugin (a module named decodekit*) in `tb`, as `module:qualname`.

    Torch's and pydantic's frames are skipped: the bug is in the code that called them with what it did.
    """
    where = "?"
    for frame, _ in traceback.walk_tb(tb):
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith("decodekit") and not module.startswith(_OWN_MODULE):
            code = frame.f_code
            where = f"{module}:{getattr(code, 'co_qualname', code.co_name)}"
    return where

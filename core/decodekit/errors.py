"""The exceptions decodekit raises; each names what was wrong and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

__all__ = [
    "PLUGIN_FAILURES",
    "CacheCapacityError",
    "ChainSpecError",
    "CompileError",
    "ContextLengthError",
    "DecodekitError",
    "NumericsError",
    "ParameterError",
    "PluginError",
    "TrainingModeWarning",
    "UnfinishedRowsWarning",
    "UnknownNameError",
]


class DecodekitError(Exception):
    """Base class of every error decodekit raises on purpose."""


class ParameterError(DecodekitError, ValueError):
    """An argument out of its allowed range or of the wrong kind: a sampler's, cache's or strategy's parameter, or a
    decode's own (its prompts and model too)."""


class UnknownNameError(DecodekitError, LookupError):
    """A sampler, cache backend, model or strategy name that no installed plugin registers."""


class ChainSpecError(DecodekitError, ValueError):
    """A chain (JSON list, `a(1) | b` string or `Chain([...])`) that cannot be parsed or built: a selector before
    the last stage, a stage that is not callable."""


class PluginError(DecodekitError):
    """A plugin failed to load, two plugins registered the same name, or one broke its contract (a loader that
    returned no model, a strategy that emitted a token outside the vocabulary)."""


# What a plugin raises is its failure (SystemExit too); Ctrl-C (KeyboardInterrupt) is the user's and goes through.
PLUGIN_FAILURES = (Exception, SystemExit, GeneratorExit)


class CacheCapacityError(DecodekitError, IndexError):
    """A write past the capacity a KV cache was created with."""


class ContextLengthError(DecodekitError, ValueError):
    """A prompt or generation longer than the model's context."""


class NumericsError(DecodekitError, FloatingPointError):
    """A row that cannot be sampled: NaN or +inf logits (the model's or the chain's), or every token removed."""


class CompileError(DecodekitError, RuntimeError):
    """`torch.compile` failed on `what` (`compile=True`) for `reason` (a line); its args rebuild it (pickled by Ray)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(what, reason)
        self.what, self.reason = what, reason

    def __str__(self) -> str:
        return f"compile=True: torch.compile failed on {self.what}: {self.reason}; compile=False gives the same tokens"


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for the closest of `names` to a mistyped `name`, or "" when none is close."""
    by_lower = {n.lower(): n for n in names}  # `Top_K` is closest to top_k, not to top_p
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


class UnfinishedRowsWarning(UserWarning):
    """Rows that ended while a stage that ends rows (a grammar) says they are unfinished: `what` it says, and
    `rows` (row, finish reason) of the decode, for a caller that says it of its own rows (a batch job's lines)."""

    def __init__(self, message: str, what: str, rows: Sequence[tuple[int, str | None]]) -> None:
        super().__init__(message)
        self.what, self.rows = what, list(rows)


class TrainingModeWarning(UserWarning):
    """A model decoded with a dropout layer in training mode (`model.eval()` turns it off)."""

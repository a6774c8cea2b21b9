"""torch's compiler warns through `logging`, not `warnings`: dynamo's recompile limit (met under `--compile` by a
scored cache on a model of more than 8 layers, docs/hf.md) is ten lines with a stack. The command line shows it
as every other warning, one line (`report_warning`); so is a graph break on `Tensor.item()` (seventeen lines, met
by an `hf:` model's ragged batch)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from decodekit_cli.errors import report_warning

__all__ = ["DYNAMO_LOGGER", "DYNAMO_LOGGERS", "torch_warnings_in_one_line"]

DYNAMO_LOGGER = "torch._dynamo.convert_frame"  # where dynamo logs its recompile limit (torch 2.13)
# A logger's filter sees only its own records, not its children's: each logger that warns is named.
DYNAMO_LOGGERS = (DYNAMO_LOGGER, "torch._dynamo.variables.tensor")  # the latter: a graph break on `Tensor.item()`


class _OneLine(logging.Filter):
    """A warning's first line and the function it names, reported as one line; the record itself dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        lines = [line.strip() for line in record.getMessage().splitlines() if line.strip()] or [""]
        function = next((line for line in lines if line.startswith("function:")), "")
        said = f"{lines[0]}, {function}" if function else lines[0]
        if "recompile_limit" in lines[0]:  # what dynamo then does, which its message leaves to its docs
            said += "; it runs that function eagerly from here (the same tokens)"
        elif lines[0].startswith("Graph break"):  # its advice is torch's settings; where it broke is what helps
            where = next((line for line in reversed(lines) if line.startswith("File ")), "")
            said = lines[0].split(", consider")[0].rstrip(":") + (f" ({where})" if where else "")
            said += "; that part runs eagerly (the same tokens)"
        report_warning(f"--compile: {said}")
        return False


@contextmanager
def torch_warnings_in_one_line() -> Iterator[None]:
    """Within this block dynamo's warnings are one line each on stderr."""
    loggers, one_line = [logging.getLogger(name) for name in DYNAMO_LOGGERS], _OneLine()
    for logger in loggers:
        logger.addFilter(one_line)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(one_line)

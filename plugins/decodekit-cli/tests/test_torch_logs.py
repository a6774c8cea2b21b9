"""torch's compiler warns through `logging` (dynamo's recompile limit: ten lines with a stack); the command line
shows such a warning as it shows every other, on one line."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from decodekit_cli import listing
from decodekit_cli.app import run
from decodekit_cli.torch_logs import DYNAMO_LOGGER

# dynamo's own message (torch 2.13, convert_frame.py), as a 10-layer Llama under `--cache h2o --compile` met it
LIMIT = (
    "torch._dynamo hit config.%s (%s)\n   function: %s\n   last reason: %s\n"
    'To log all recompilation reasons, use TORCH_LOGS="recompiles".\nTo diagnose recompilation issues, see %s'
)
ARGS = ("recompile_limit", 8, "'forward' (modeling_llama.py:232)", "18/7: self.layer_idx == 3", "https://docs")


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_dynamos_recompile_limit_is_one_warning_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: torch's handler printed the ten lines, each prefixed with its logger's header."""
    real, reached = listing.samplers_report, Collected()
    logging.getLogger(DYNAMO_LOGGER).addHandler(reached)  # where torch's handler would get the record

    def warned(*args: Any, **kwargs: Any) -> Any:  # as dynamo logs it in the middle of a command
        logging.getLogger(DYNAMO_LOGGER).warning(LIMIT, *ARGS)
        return real(*args, **kwargs)

    monkeypatch.setattr(listing, "samplers_report", warned)
    try:
        assert run(["samplers", "greedy"]) == 0
    finally:
        logging.getLogger(DYNAMO_LOGGER).removeHandler(reached)
    assert reached.records == []
    assert capsys.readouterr().err == (
        "decodekit: warning: --compile: torch._dynamo hit config.recompile_limit (8), function: 'forward' "
        "(modeling_llama.py:232); it runs that function eagerly from here (the same tokens)\n"
    )
    assert not logging.getLogger(DYNAMO_LOGGER).filters  # the command's filter went with it

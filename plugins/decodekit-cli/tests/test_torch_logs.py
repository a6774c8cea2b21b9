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


def logged_in_a_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], logger: str, message: str, *args: Any
) -> str:
    """What a command's stderr shows when torch logs `message % args` to `logger` in its middle (as dynamo logs);
    torch's own handler on that logger must get nothing, and the command's filter goes with it."""
    real, reached = listing.samplers_report, Collected()
    logging.getLogger(logger).addHandler(reached)  # where torch's handler would get the record

    def warned(*call: Any, **kwargs: Any) -> Any:
        logging.getLogger(logger).warning(message, *args)
        return real(*call, **kwargs)

    monkeypatch.setattr(listing, "samplers_report", warned)
    try:
        assert run(["samplers", "greedy"]) == 0
    finally:
        logging.getLogger(logger).removeHandler(reached)
    assert reached.records == []
    assert not logging.getLogger(logger).filters
    return capsys.readouterr().err


def test_dynamos_recompile_limit_is_one_warning_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: torch's handler printed the ten lines, each prefixed with its logger's header."""
    assert logged_in_a_command(monkeypatch, capsys, DYNAMO_LOGGER, LIMIT, *ARGS) == (
        "decodekit: warning: --compile: torch._dynamo hit config.recompile_limit (8), function: 'forward' "
        "(modeling_llama.py:232); it runs that function eagerly from here (the same tokens)\n"
    )


# dynamo's graph break on `Tensor.item()` (torch 2.13, variables/tensor.py), as `--compile` on an `hf:` Llama with a
# ragged batch under the dense cache met it: seventeen lines, torch's header on each
ITEM_LOGGER = "torch._dynamo.variables.tensor"
ITEM = (
    "Graph break from `Tensor.item()`, consider setting:\n    torch._dynamo.config.capture_scalar_outputs = True\n"
    "or:\n    env TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1\nto include these operations in the captured graph.\n\n"
    'Graph break: from user code at:\n  File "/x/decodekit_hf/model.py", line 246, in forward\n'
    "    if int(first.min()) < past:\n"
)


def test_a_graph_break_on_item_is_one_warning_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: only the recompile limit's logger was filtered, and torch's handler printed all of these lines."""
    assert logged_in_a_command(monkeypatch, capsys, ITEM_LOGGER, ITEM) == (
        'decodekit: warning: --compile: Graph break from `Tensor.item()` (File "/x/decodekit_hf/model.py", line 246, '
        "in forward); that part runs eagerly (the same tokens)\n"
    )

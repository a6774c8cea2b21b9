"""A test plugin for the batch-job tests (`DECODEKIT_EXTRA_PLUGINS=cli_testplugin,batch_testplugin`).

- `batch-test-unloadable`: a model whose loader fails, so a check that must come before the model
  loads shows its own error, not the loader's.
- `fail_on(token=T)`: a processor that raises `NumericsError` while decoding whenever a row's
  prompt holds token T (not 0, the padding); a batch holding such a row fails as a whole, which
  is what the job's one-row-at-a-time retry has to undo. Where $DECODEKIT_TEST_HOLD names a file,
  a decode whose prompts hold a "~" waits while that file exists, touching `<file>.<pid>` to say
  so: the Ray tests stop a job with work left, on any machine, to kill its driver or an actor.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli_testplugin import ALPHABET
from pydantic import Field

from decodekit import NumericsError, Params, hookimpl
from decodekit.hookspecs import ModelRegistrar, SamplerRegistrar
from decodekit.stage import ProcessorBase

if TYPE_CHECKING:
    from torch import Tensor

    from decodekit.context import DecodeContext

__all__ = ["HELD", "UNLOADABLE", "FailOn", "FailOnParams", "load_unloadable", "register_models", "register_samplers"]

UNLOADABLE = "batch-test-unloadable"
HELD = ALPHABET.index("~")  # cli-test-gpt's token of the prompts that wait at the hold


def load_unloadable(argument: str | None = None, params: object = None) -> Any:
    raise RuntimeError("the batch-test model was loaded")


class FailOnParams(Params):
    token: int = Field(ge=1, description="the token id whose presence in a row's prompt fails the step")


class FailOn(ProcessorBase[FailOnParams]):
    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        prompts = ctx.tokens[:, : ctx.tokens.shape[1] - ctx.step]  # [B, P] left-padded with 0
        if bool((prompts == HELD).any()):
            _hold()
        if bool((prompts == self.params.token).any()):
            raise NumericsError(f"fail_on: a prompt holds token {self.params.token}")
        return logits


def _hold() -> None:
    """Wait while the file $DECODEKIT_TEST_HOLD names exists."""
    hold = os.environ.get("DECODEKIT_TEST_HOLD")
    while hold and Path(hold).exists():
        Path(f"{hold}.{os.getpid()}").touch()
        time.sleep(0.05)


@hookimpl
def register_models(register: ModelRegistrar) -> None:
    register(UNLOADABLE, f"{__name__}:load_unloadable", description="A model whose loader always fails")


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register("fail_on", f"{__name__}:FailOn", FailOnParams, "Fail the step when a row's context holds a token")

"""A test plugin for the batch-job tests (`DECODEKIT_EXTRA_PLUGINS=cli_testplugin,batch_testplugin`).

- `batch-test-unloadable`: a model whose loader fails, so a check that must come before the model
  loads shows its own error, not the loader's.
- `batch-test-not-on-ray`: `cli-test-gpt`, but its loader fails inside a Ray worker, as a model
  whose checkpoint or plugin a cluster's other nodes lack.
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

import cli_testplugin
from cli_testplugin import ALPHABET
from pydantic import Field

from decodekit import NumericsError, Params, hookimpl
from decodekit.hookspecs import ModelRegistrar, SamplerRegistrar
from decodekit.stage import ProcessorBase

if TYPE_CHECKING:
    from torch import Tensor

    from decodekit.context import DecodeContext

__all__ = ["HELD", "NOT_ON_RAY", "UNLOADABLE", "FailOn", "FailOnParams", "load_not_on_ray", "load_unloadable"]
__all__ += ["register_models", "register_samplers"]

UNLOADABLE = "batch-test-unloadable"
NOT_ON_RAY = "batch-test-not-on-ray"
HELD = ALPHABET.index("~")  # cli-test-gpt's token of the prompts that wait at the hold


def load_unloadable(argument: str | None = None, params: object = None) -> Any:
    raise RuntimeError("the batch-test model was loaded")


def load_not_on_ray(argument: str | None = None, params: object = None) -> Any:
    import ray

    if ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
        raise FileNotFoundError("no checkpoint on this node")
    return cli_testplugin.load_model(argument, params)


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
    register(NOT_ON_RAY, f"{__name__}:load_not_on_ray", description="A model whose loader fails on Ray's workers")


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register("fail_on", f"{__name__}:FailOn", FailOnParams, "Fail the step when a row's context holds a token")

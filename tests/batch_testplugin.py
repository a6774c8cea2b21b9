"""A test plugin for the batch-job tests (`DECODEKIT_EXTRA_PLUGINS=cli_testplugin,batch_testplugin`).

- `batch-test-unloadable`: a model whose loader fails, so a check that must come before the model
  loads shows its own error, not the loader's.
- `batch-test-not-on-ray`: `cli-test-gpt`, but its loader fails inside a Ray worker, as a model
  whose checkpoint or plugin a cluster's other nodes lack.
- `fail_on(token=T)`: a processor that raises `NumericsError` while decoding whenever a row's
  prompt holds token T (not 0, the padding); a batch holding such a row fails as a whole, which
  is what the job's one-row-at-a-time retry has to undo. Where $DECODEKIT_TEST_HOLD names a file,
  each process decodes the prompts of its first batch (`PASSED` of them), then waits before any
  other prompt while that file exists, touching `<file>.<pid>` to say so: the Ray tests stop a job
  with parts written and work left, on any machine, to kill its driver or an actor. Which batch
  passes is whichever the process decodes first: a Ray Data pool actor runs the calls it was handed
  in any order (Ray Data starts its actors with allow_out_of_order_execution), so a hold on fixed
  lines could find every actor at it with the free lines queued behind, and the job wrote nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cli_testplugin
from pydantic import Field

from decodekit import NumericsError, Params, hookimpl
from decodekit.hookspecs import ModelRegistrar, SamplerRegistrar
from decodekit.stage import ProcessorBase

if TYPE_CHECKING:
    from torch import Tensor

    from decodekit.context import DecodeContext

__all__ = ["NOT_ON_RAY", "PASSED", "UNLOADABLE", "FailOn", "FailOnParams", "load_not_on_ray", "load_unloadable"]
__all__ += ["register_models", "register_samplers"]

UNLOADABLE = "batch-test-unloadable"
NOT_ON_RAY = "batch-test-not-on-ray"
PASSED = 4  # prompts a process decodes before the hold: one batch of the Ray tests' (--batch-size 4)
_passed: set[tuple[int, ...]] = set()  # this process's prompts decoded past the hold


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
        _hold(prompts)
        if bool((prompts == self.params.token).any()):
            raise NumericsError(f"fail_on: a prompt holds token {self.params.token}")
        return logits


def _hold(prompts: Tensor) -> None:
    """Past this process's first `PASSED` prompts, wait while the file $DECODEKIT_TEST_HOLD names exists."""
    hold = os.environ.get("DECODEKIT_TEST_HOLD")
    if not hold:
        return
    # Without the padding: a row of the batch decoded again on its own (its retry) is the same prompt.
    rows = {tuple(token for token in row if token) for row in prompts.tolist()}
    if len(_passed | rows) <= PASSED:
        _passed.update(rows)
        return
    while Path(hold).exists():
        Path(f"{hold}.{os.getpid()}").touch()
        time.sleep(0.05)


@hookimpl
def register_models(register: ModelRegistrar) -> None:
    register(UNLOADABLE, f"{__name__}:load_unloadable", description="A model whose loader always fails")
    register(NOT_ON_RAY, f"{__name__}:load_not_on_ray", description="A model whose loader fails on Ray's workers")


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register("fail_on", f"{__name__}:FailOn", FailOnParams, "Fail the step when a row's context holds a token")

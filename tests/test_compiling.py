"""`compile=True` when torch's compiler fails: a `CompileError` naming what it compiled and why, raised from
the compiler's own error; an error of the compiled function itself passes unchanged.

`torch.compile` is replaced by a stand-in that fails as inductor does without a working C++ compiler
(`CXX=/bin/false` gives `InductorError: InvalidCxxCompiler: No working C++ compiler found ...`), so
nothing here compiles.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._dynamo.exc import TorchDynamoException

import decodekit as dk
from decodekit import compiling
from decodekit.compiling import eager
from tinymodels import tiny_gpt

NO_CXX = RuntimeError("No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, '/bin/false')\nmore")


def _inductor_error(inner: Exception) -> Exception:
    """The error inductor raises when its C++ compiler fails (`inner`): torch 2.6 has none, but a test using it is
    a compiling one, skipped on a torch before 2.13, which refuses compile=True up front (tests/test_request.py)."""
    from torch._inductor.exc import InductorError

    return InductorError(inner, None)


def _failing_compile(fails: Callable[[Any], bool], error: Exception) -> Callable[..., Any]:
    """A `torch.compile` whose result raises `error` for the functions `fails` picks, else runs eagerly."""

    def compile_(fn: Any, **options: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            if fails(fn):
                raise error
            return fn(*args, **kwargs)

        return run

    return compile_


def _is_model(fn: Any) -> bool:
    return fn is compiling._forward  # the model's forward, which takes the model as an argument


def _generate(compile: bool) -> list[list[int]]:
    model = tiny_gpt(n_layer=1)
    chain = dk.Chain.parse("greedy")  # a new chain: none compiled before
    return dk.generate(model, [[1, 2]], chain=chain, max_new_tokens=3, cache="dense", compile=compile).tokens


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
@pytest.mark.parametrize(
    ("fails", "what"),
    [(_is_model, "the model's forward"), (lambda fn: not _is_model(fn), "the chain's step")],
    ids=["model", "chain"],
)
def test_a_compiler_failure_is_a_compile_error_naming_what_and_why(
    monkeypatch: pytest.MonkeyPatch, fails: Callable[[Any], bool], what: str
) -> None:
    inductor = _inductor_error(NO_CXX)
    monkeypatch.setattr(torch, "compile", _failing_compile(fails, inductor))
    with pytest.raises(dk.CompileError) as caught:
        _generate(compile=True)
    assert str(caught.value) == (
        f"compile=True: torch.compile failed on {what}: RuntimeError: No working C++ compiler found in "
        "torch._inductor.config.cpp.cxx: (None, '/bin/false'); compile=False gives the same tokens"
    )
    assert caught.value.__cause__ is inductor  # the compiler's whole story, for a traceback
    assert isinstance(caught.value, RuntimeError)  # what callers caught before: the compiler's errors are one


def test_a_dynamo_error_without_an_inner_one_gives_its_own_first_line(monkeypatch: pytest.MonkeyPatch) -> None:
    error = TorchDynamoException("\n  cannot trace this frame\nstack ...")
    monkeypatch.setattr(torch, "compile", _failing_compile(_is_model, error))
    with pytest.raises(dk.CompileError, match=r"the model's forward: TorchDynamoException: cannot trace this frame;"):
        _generate(compile=True)


def test_an_error_of_the_compiled_function_itself_passes_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    own = RuntimeError("the model's own failure")  # raised at run time: the compiler's or not, no one can tell
    monkeypatch.setattr(torch, "compile", _failing_compile(_is_model, own))
    with pytest.raises(RuntimeError) as caught:
        _generate(compile=True)
    assert caught.value is own


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch cannot compile)
def test_the_wrapper_passes_calls_and_results_through(monkeypatch: pytest.MonkeyPatch) -> None:
    eager = _generate(compile=False)
    monkeypatch.setattr(torch, "compile", _failing_compile(lambda fn: False, _inductor_error(NO_CXX)))
    assert _generate(compile=True) == eager  # the stand-in runs each function eagerly, through the wrapper


def test_a_compile_error_survives_pickling() -> None:
    """A Ray actor's error reaches the driver pickled: the exception is rebuilt from its args."""
    error = dk.CompileError("the chain's step", "RuntimeError: no compiler")
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again)) == (dk.CompileError, str(error))
    assert (again.what, again.reason) == (error.what, error.reason)


@pytest.mark.xdist_group("compile")
def test_an_eager_function_runs_outside_the_graph_that_calls_it() -> None:
    """Traced, `is_compiling()` would read True (and be folded into the graph); run outside, False on every call."""
    seen: list[bool] = []

    def host_side(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.compiler.is_compiling())
        return x + 1

    outside = eager(host_side)
    step = torch.compile(lambda x: outside(x * 2) - 1, backend="eager")
    assert [int(step(torch.tensor(n))) for n in range(3)] == [0, 2, 4]
    assert seen == [False, False, False]
    assert eager(host_side)(torch.tensor(1)) == 2 and seen[-1] is False  # called eagerly: the function itself


def test_an_eager_function_called_eagerly_loads_no_compiler() -> None:
    """Making the disabled form imports torch's compiler (~1 s): an eager decode never does."""
    import subprocess
    import sys

    code = (
        "import sys, torch; from decodekit.compiling import eager; "
        "assert eager(lambda x: x + 1)(torch.tensor(1)) == 2; print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"

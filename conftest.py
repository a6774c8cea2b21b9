"""Fixtures for every test of the repository (core and plugins)."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

pytest_plugins = ["compile_counting"]  # tests/compile_counting.py: the `graphs` fixture of the compile tests

_HOME = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Keep the suite, and every subprocess it starts, out of $HOME: matplotlib's font cache,
    pip's cache and version probe, and the XDG and Hugging Face caches go to a temporary folder.
    xdist's workers inherit the controller's (a worker's own folder would outlive it: workers can end
    before their unconfigure runs)."""
    if hasattr(config, "workerinput"):
        return
    home = config.stash[_HOME] = tempfile.mkdtemp(prefix="decodekit-tests-")
    for var, sub in (("MPLCONFIGDIR", "matplotlib"), ("XDG_CACHE_HOME", "cache"), ("PIP_CACHE_DIR", "pip")):
        os.environ[var] = os.path.join(home, sub)
    os.environ["HF_HOME"] = os.path.join(home, "huggingface")
    os.environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    """The folder goes when the run ends."""
    if _HOME in config.stash:
        shutil.rmtree(config.stash[_HOME], ignore_errors=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection built (torch, transformers and the rest of the imports, every test item:
    ~550,000 objects) out of the cyclic garbage collector's reach: it lives until the process ends, and a
    full collection (during the tests, and pytest's last one at unconfigure) would walk all of it again."""
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Iterator[None]:
    """Run the suite on one intra-op thread: its models are tiny, one thread is fastest for them
    (two on a busy 2-core machine spin for milliseconds per op), and it is kinder to a shared
    machine. The thread count is given back at the end."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _one_torch_thread_each_test(_one_torch_thread: None) -> None:
    """One thread again at every test's start: a test that set another count (a command run in-process)
    must not slow the rest of the suite down."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _in_its_xdist_group(request: pytest.FixtureRequest) -> None:
    """A test marked `xdist_group` runs in its group's worker under `--dist loadgroup` (which marks it by
    a "@group" suffix on its id): a pytest that breaks that (9.2, pytest-xdist issue #1386) would start a
    group's costly module fixtures once per worker, unnoticed."""
    mark = request.node.get_closest_marker("xdist_group")
    if mark is not None and getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith(f"@{mark.args[0]}"), f"{request.node.nodeid}: not in its xdist group"


@pytest.fixture(autouse=True)
def _compiled_where_torch_can(request: pytest.FixtureRequest) -> None:
    """A compiling test (the `compile` xdist group, the `graphs` fixture) skips on a torch that refuses
    compile=True (before 2.13: `make floors`); the refusal itself is tested (tests/test_request.py)."""
    mark = request.node.get_closest_marker("xdist_group")
    if (mark is not None and mark.args[0] == "compile") or "graphs" in request.fixturenames:
        from decodekit import compiling

        if (why := compiling.unsupported()) is not None:
            pytest.skip(f"compile=True {why}")

"""Fixtures for every test of the repository (core and plugins)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Keep the suite, and every subprocess it starts, out of $HOME: matplotlib's font cache,
    pip's cache and version probe, and the XDG and Hugging Face caches go to a temporary folder."""
    home = tempfile.mkdtemp(prefix="decodekit-tests-")
    for var, sub in (("MPLCONFIGDIR", "matplotlib"), ("XDG_CACHE_HOME", "cache"), ("PIP_CACHE_DIR", "pip")):
        os.environ[var] = os.path.join(home, sub)
    os.environ["HF_HOME"] = os.path.join(home, "huggingface")
    os.environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"


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

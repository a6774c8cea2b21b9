"""Fixtures for every test of the repository (core and plugins)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Iterator[None]:
    """Run the suite on one intra-op thread: its models are tiny, one thread is fastest for them
    (two on a busy 2-core machine spin for milliseconds per op), and it is kinder to a shared
    machine. The thread count is given back at the end."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""The repository's own test set-up: what a run leaves behind."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT_CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"


def test_the_suites_home_folder_is_removed_when_the_run_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT_CONFTEST)
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    for var in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "PIP_CACHE_DIR", "HF_HOME", "PIP_DISABLE_PIP_VERSION_CHECK"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored after the test
    config = SimpleNamespace(stash=pytest.Stash())

    conftest.pytest_configure(config)
    home = Path(os.environ["HF_HOME"]).parent
    assert home.name.startswith("decodekit-tests-") and home.is_dir()
    (home / "cache" / "left.txt").parent.mkdir(parents=True)
    (home / "cache" / "left.txt").write_text("x")

    conftest.pytest_unconfigure(config)
    assert not home.exists()

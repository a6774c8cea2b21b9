"""`decodekit new-plugin`'s files as written: they pass ruff (with the generated pyproject's settings) and mypy
--strict over the package, and the README says what the tests check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from decodekit_cli.plugin_template import KINDS, files_for


def _write(folder: Path, kind: str) -> Path:
    for path, text in files_for(kind, f"my_{kind}").items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    return folder


def _run(*args: str, cwd: Path) -> str:
    """The tool's complaints, empty when it passes."""
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True)
    return "" if done.returncode == 0 else done.stdout + done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_ruff_passes_on_the_generated_files(kind: str, tmp_path: Path) -> None:
    pytest.importorskip("ruff")
    folder = _write(tmp_path, kind)
    assert _run("ruff", "check", "--no-cache", ".", cwd=folder) == ""
    assert _run("ruff", "format", "--no-cache", "--check", ".", cwd=folder) == ""


@pytest.mark.slow
def test_mypy_strict_passes_on_every_kinds_package(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    sources = [str(_write(tmp_path / kind, kind) / "src") for kind in KINDS]
    assert _run("mypy", "--strict", "--no-incremental", *sources, cwd=tmp_path) == ""


@pytest.mark.parametrize("kind", KINDS)
def test_the_readme_claims_the_conformance_kit_only_where_the_tests_run_it(kind: str) -> None:
    files = files_for(kind, f"my_{kind}")
    runs_kit = "Conformance" in files[f"tests/test_my_{kind}.py"]
    assert ("conformance kit" in files["README.md"]) == runs_kit, files["README.md"]

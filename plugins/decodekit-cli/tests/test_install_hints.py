"""What the command line tells a user to type to install something works on a machine with only a
checkout of decodekit (no index), and still from an index."""

from __future__ import annotations

import re
import shlex
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from decodekit_cli import install_hints

from decodekit.standard_plugins import STANDARD_PLUGINS

ROOT = Path(__file__).resolve().parents[3]  # the checkout: plugins/decodekit-cli/tests/ -> the repository


def _plugin_dependencies(dist: str) -> set[str]:
    """The decodekit plugins `dist` needs at run time, read from its pyproject.toml."""
    project = tomllib.loads((ROOT / "plugins" / dist / "pyproject.toml").read_text())["project"]
    names = {re.match(r"[A-Za-z0-9_.-]+", d)[0] for d in project.get("dependencies", [])}  # type: ignore[index]
    return {n for n in names if n.startswith("decodekit-")}


def test_the_checkout_decodekit_was_installed_from_is_found() -> None:
    # the suite runs on `make install-dev`: decodekit installed (editable) from this checkout
    assert install_hints.checkout() == ROOT


@pytest.mark.parametrize(
    "dist", sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
)
def test_a_checkout_hint_installs_the_plugins_a_plugin_needs_that_no_index_gives(
    dist: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pip install plugins/decodekit-shakespeare` alone failed without an index: 'No matching distribution
    found for decodekit-gpt'. The hint lists every plugin it needs that is not installed, each by its folder."""
    monkeypatch.setattr(install_hints, "installed", lambda name: False)
    want = {dist}
    while needed := {n for d in want for n in _plugin_dependencies(d)} - want:  # what they need, in turn
        want |= needed
    hint = install_hints.install_hint([dist])
    assert hint.startswith(f"pip install {dist} (from a checkout: pip install ")
    assert set(re.findall(r"\S+/plugins/(decodekit-[a-z0-9-]+)", hint)) == want, hint
    assert all((ROOT / "plugins" / d).is_dir() for d in want)


def test_a_checkout_hint_names_absolute_folders_so_it_works_from_any_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install_hints, "installed", lambda name: name == "decodekit-gpt")
    assert install_hints.install_hint(["decodekit-shakespeare", "decodekit-top-k"]) == (
        "pip install decodekit-shakespeare decodekit-top-k (from a checkout: pip install "
        f"{ROOT}/plugins/decodekit-cache-window {ROOT}/plugins/decodekit-shakespeare {ROOT}/plugins/decodekit-top-k)"
    )


def test_without_a_known_checkout_the_hint_says_to_run_it_in_the_checkouts_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(install_hints, "checkout", lambda: None)  # decodekit installed from an index or a wheel
    monkeypatch.setattr(install_hints, "installed", lambda name: False)
    assert install_hints.install_hint(["decodekit-ray"]) == (
        "pip install decodekit-ray (from a checkout of decodekit, in its folder: pip install plugins/decodekit-cli "
        "plugins/decodekit-ray)"
    )


def test_every_standard_plugin_is_a_folder_of_the_checkout() -> None:
    assert {d for d in STANDARD_PLUGINS.values() if not (ROOT / "plugins" / d / "pyproject.toml").exists()} == set()


def test_a_checkout_in_a_folder_with_a_space_is_quoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip writes the folder as `file:///.../my%20checkout`; the hint printed it unquoted, so the command a user
    copied installed 'checkout/plugins/...' from the wrong folder (or nothing)."""
    root = tmp_path / "my checkout"
    (root / "plugins").mkdir(parents=True)

    class Dist:
        def read_text(self, name: str) -> str:
            return '{"url": "' + root.as_uri() + '", "dir_info": {}}'

    monkeypatch.setattr(metadata, "distribution", lambda name: Dist())  # the module install_hints reads
    monkeypatch.setattr(install_hints, "installed", lambda name: name == "decodekit-gpt")
    assert "%20" in root.as_uri() and install_hints.checkout() == root
    folders = [str(root / "plugins" / d) for d in ("decodekit-cache-window", "decodekit-shakespeare")]
    assert shlex.split(install_hints.install_command(["decodekit-shakespeare"])) == ["pip", "install", *folders]
    hint = install_hints.install_hint(["decodekit-shakespeare"])
    assert shlex.split(hint.split("(from a checkout: ", 1)[1].rstrip(")")) == ["pip", "install", *folders]

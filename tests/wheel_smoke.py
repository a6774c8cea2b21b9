"""Smoke test of the built wheels in a fresh venv: `python tests/wheel_smoke.py DIST_DIR` (make dist-check).

Run from outside the repository with the venv's python: decodekit must come from site-packages,
each wheel must be listed by `decodekit plugins`, the demo model must generate, and the
conformance kit must run from the installed `decodekit.testing`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import decodekit as dk
from decodekit.cache import KVCache
from decodekit.testing import CacheConformance, check_cache, check_processor


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).with_name("decodekit")
    return subprocess.run([str(cli), *args], capture_output=True, text=True, check=True, timeout=300)


class GQAFromRegistry(CacheConformance):
    """The cache kit on `gqa` built by name, from the installed wheels."""

    def make(self, spec: dk.CacheSpec) -> KVCache:
        return dk.create_cache("gqa", spec)


def main(dist: Path) -> None:
    assert "site-packages" in dk.__file__, f"decodekit imported from {dk.__file__}, not from the installed wheel"
    wheels = {w.name.split("-")[0].replace("_", "-") for w in dist.glob("*.whl")}
    sdists = {s.name.rsplit("-", 1)[0].replace("_", "-") for s in dist.glob("*.tar.gz")}
    assert wheels == sdists and len(wheels) > 10, (wheels, sdists)

    listed = {p["distribution"] for p in json.loads(_run("plugins", "--json").stdout)["plugins"]}
    assert listed == wheels, f"wheels not listed: {wheels - listed}; listed without a wheel: {listed - wheels}"

    generated = _run("generate", "ROMEO:", "--max-new-tokens", "40", "--seed", "0")
    assert generated.stdout.startswith("ROMEO:") and len(generated.stdout) > 40, generated.stdout
    assert generated.stderr == "", generated.stderr  # no warning (NumPy, plugins) on a clean install

    check_processor(dk.create("top_p", p=0.9))
    check_cache(GQAFromRegistry())
    print(f"wheel smoke test passed: {len(wheels)} distributions installed, listed, generating, conformant")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())

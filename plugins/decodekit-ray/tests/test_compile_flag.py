"""`--ray --compile`: the flag reaches every actor's decode, checked without starting Ray or compiling.

The command's Ray part (`decodekit_ray.job._decode`) is replaced, to catch the job it would ship; an
actor (`LineDecoder`) then decodes its lines in this process, with a `torch.compile` that records what it
is given and runs it eagerly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from decodekit_cli.batch_job import BatchJob
from decodekit_cli.batch_settings import parsed_chain
from decodekit_ray.decoder import LineDecoder
from test_cli import MODEL, cli

import decodekit.plugins

PLUGINS = "cli_testplugin"
LINES = [b'{"prompt": "a"}', b'{"prompt": "bc"}']


@pytest.fixture
def own_chains() -> Iterator[None]:
    """Chains parsed anew, and forgotten after: a batch job keeps each chain it parses, and a chain its
    compiled step (here the eager stand-in's), which a later `--compile` in this process would run."""
    parsed_chain.cache_clear()
    yield
    parsed_chain.cache_clear()


def test_compile_reaches_the_actors_decode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, own_chains: None) -> None:
    jobs: list[BatchJob] = []
    monkeypatch.setattr("decodekit_ray.job._decode", lambda job, options, lines, parts: jobs.append(job))
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(line + b"\n" for line in LINES))
    args = ["--input", str(prompts), "--output", str(tmp_path / "o.jsonl"), "-m", MODEL, "--max-new-tokens", "3"]
    r = cli("generate", *args, "--seed", "0", "--ray", "--compile", DECODEKIT_EXTRA_PLUGINS=PLUGINS)
    assert r.returncode == 0, r.stderr
    [job] = jobs
    assert job.settings.compile is True  # what every actor is built with: LineDecoder(job.settings)

    given: list[Any] = []

    def eager_compile(fn: Any, **options: Any) -> Any:
        given.append(fn)
        return fn

    monkeypatch.setattr(torch, "compile", eager_compile)
    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)  # no Ray: no GPU of its own
    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", PLUGINS)
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # built again with the test plugin, put back after
    batch = {"line": np.array([1, 2]), "data": np.array(LINES, dtype=object)}
    compiled = LineDecoder(job.settings)(batch)
    assert any(isinstance(fn, torch.nn.Module) for fn in given)  # the actor's model went through torch.compile
    eager = LineDecoder(dataclasses.replace(job.settings, compile=False))(batch)
    assert list(compiled["record"]) == list(eager["record"])

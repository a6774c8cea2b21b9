"""`--ray --compile`: the flag reaches every actor's decode, and an actor's compiler failure is one line;
checked without starting Ray or compiling.

The command's Ray part (`decodekit_ray.job._decode`) is replaced, to catch the job it would ship; an
actor (`LineDecoder`) then decodes its lines in this process, with a `torch.compile` that records what it
is given and runs it eagerly.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from decodekit_cli.batch_job import BatchJob
from decodekit_cli.batch_settings import parsed_chain_cache
from decodekit_ray.cluster import actor_failures_unlogged
from decodekit_ray.decoder import LineDecoder
from test_cli import MODEL, cli

import decodekit.compiling
import decodekit.plugins
from decodekit.errors import CompileError

PLUGINS = "cli_testplugin"
LINES = [b'{"prompt": "a"}', b'{"prompt": "bc"}']


@pytest.fixture
def own_chains() -> Iterator[None]:
    """Chains parsed anew, and forgotten after: a batch job keeps each chain it parses, and a chain its
    compiled step (here the eager stand-in's), which a later `--compile` in this process would run."""
    parsed_chain_cache.cache_clear()
    yield
    parsed_chain_cache.cache_clear()


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch refuses --compile)
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
    assert decodekit.compiling._forward in given  # the actor's model's forward went through torch.compile
    eager = LineDecoder(dataclasses.replace(job.settings, compile=False))(batch)
    assert list(compiled["record"]) == list(eager["record"])


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch refuses --compile)
def test_an_actors_compile_error_is_one_line_naming_compile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Ray raises an actor's CompileError as a RayTaskError that is one too (`raise_original_map_exception`);
    the command reported it as "unexpected RayTaskError(UserCodeException)" with the actor's traceback."""
    from ray.exceptions import RayTaskError

    failure = CompileError("the chain's step", "InvalidCxxCompiler: No working C++ compiler found")

    def fails(*args: Any) -> None:
        raise RayTaskError("MapWorker.submit", "Traceback (most recent call last): ...", failure).as_instanceof_cause()

    monkeypatch.setattr("decodekit_ray.job._decode", fails)
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(line + b"\n" for line in LINES))
    args = ["--input", str(prompts), "--output", str(tmp_path / "o.jsonl"), "-m", MODEL, "--seed", "0"]
    r = cli("generate", *args, "--ray", "--compile", DECODEKIT_EXTRA_PLUGINS=PLUGINS)
    assert (r.returncode, r.stderr) == (
        1,
        "decodekit: error: --compile: torch.compile failed on the chain's step: InvalidCxxCompiler: No working C++ "
        "compiler found; run without --compile (the same output); 0 records written (--resume continues)\n",
    )


def test_ray_data_logs_no_compile_error_while_the_job_runs() -> None:
    """Ray Data logs an exception it does not know with its whole traceback; a CompileError is the command's."""
    import ray.data  # noqa: F401  # its import sets up its logging, as the job's (decodekit_ray.job) does

    handlers = logging.getLogger("ray.data").handlers
    assert handlers  # Ray Data's own: a file and stderr

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("ray.data.x", logging.ERROR, __file__, 1, "failed", None, (type(exc), exc, None))

    compile_failure, other = record(CompileError("the chain's step", "no")), record(RuntimeError("other"))
    with actor_failures_unlogged():
        assert [h.filter(compile_failure) for h in handlers] == [False] * len(handlers)
        assert all(h.filter(other) for h in handlers)
        try:  # a record without the exception, logged while it is handled ("Exception occurred in ...")
            raise CompileError("the chain's step", "no")
        except CompileError:
            plain = logging.LogRecord("ray.data.x", logging.ERROR, __file__, 1, "failed", None, None)
            assert not any(h.filter(plain) for h in handlers)
    assert all(h.filter(compile_failure) for h in handlers)  # after the job: as before

"""`decodekit ...` run in this process as a new process would run it.

A new process costs seconds (Python, torch, the plugins) and the commands the tests run take
milliseconds, so the tests run them here: with the environment, stdin and working directory a
process would get, stdout and stderr captured, the plugin registry built from that environment on
first use (the one in use is set aside and put back), and Python's default warning filters. What
only a process shows (the exit status on a signal, Ctrl-C, what a fresh interpreter imports) is
tested in one: `test_cli._popen`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import decodekit.plugins

__all__ = ["OWN_MODEL", "cli_captured", "main_with_model", "run_cli"]

# What the registry is built from (`decodekit.plugins`): a change means another registry.
PLUGIN_VARIABLES = (
    "DECODEKIT_LOAD_PLUGINS",
    "DECODEKIT_DISABLE_PLUGINS",
    "DECODEKIT_EXTRA_PLUGINS",
    "DECODEKIT_STRICT_PLUGINS",
)


@contextlib.contextmanager
def _environment(env: Mapping[str, str], fresh_plugins: bool) -> Iterator[None]:
    """`os.environ` is `env` in the block; if its plugin variables differ (or `fresh_plugins`), the
    registry is rebuilt on first use and the one in use put back afterwards."""
    saved = dict(os.environ)
    registry = decodekit.plugins._registry
    other_plugins = fresh_plugins or any(saved.get(name) != env.get(name) for name in PLUGIN_VARIABLES)
    os.environ.clear()
    os.environ.update(env)
    if other_plugins:
        decodekit.plugins._registry = None
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if other_plugins:
            decodekit.plugins._registry = registry


@contextlib.contextmanager
def _default_warnings() -> Iterator[None]:
    """Python's default filters (as `python` without -W starts), each warning shown once per command."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        yield


@contextlib.contextmanager
def _process_state(stdin: str, cwd: Path | None) -> Iterator[None]:
    """stdin, the working directory and torch's thread count, as they were afterwards."""
    saved_stdin, saved_cwd = sys.stdin, os.getcwd()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    # as a process's stdin: text, and the bytes under it (`sys.stdin.buffer`: `--input -`)
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8", newline="\n")
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        torch = sys.modules.get("torch")
        if torch is not None and threads is not None:
            torch.set_num_threads(threads)


def run_cli(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    stdin: str = "",
    cwd: Path | None = None,
    merge: bool = False,
    fresh_plugins: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`decodekit ARGV` with environment `env` (default: this one); its exit status, stdout and stderr.
    `merge`: stderr written into stdout as it comes (`2>&1`), the returned stderr empty.
    `fresh_plugins`: a registry of its own even when `env` names the same plugins as this process
    (one built here may hold plugins a test registered in code)."""
    from decodekit_cli import main

    out = io.StringIO()
    err = out if merge else io.StringIO()
    with (
        _environment(os.environ if env is None else env, fresh_plugins),
        _default_warnings(),
        _process_state(stdin, cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            status = main(list(argv))
        except SystemExit as exc:  # as `python -m decodekit_cli` would exit
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(list(argv), status, out.getvalue(), "" if merge else err.getvalue())


def cli_captured(capsys: Any, *args: str) -> tuple[int, str, str]:
    """`decodekit ARGS` in this process under pytest's `capsys` (no environment of its own: a new process would
    cost seconds and test nothing more): its exit status, stdout and stderr, without what was printed before it
    (a checkpoint's `save_pretrained` progress bar)."""
    from decodekit_cli import main

    capsys.readouterr()
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def batch_captured(
    capsys: Any, tmp_path: Path, lines: Sequence[Mapping[str, Any]], *args: str
) -> tuple[int, str, Path]:
    """`decodekit generate --input in.jsonl --output out.jsonl ARGS` over `lines` (one JSON object each) under
    pytest's `capsys`: its exit status, stderr and the output's path."""
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    status, _, err = cli_captured(capsys, "generate", "--input", str(source), "--output", str(output), *args)
    return status, err, output


OWN_MODEL = "own-model"  # the name `main_with_model` registers its model under


def main_with_model(loader: Any, *args: str) -> int:
    """`decodekit ARGS` in this process with `loader(argument, params)` registered as the model `own-model` (a
    variation of a test model: without a tokenizer, with another one); its exit status."""
    from decodekit_cli import main

    import decodekit as dk

    class Plugin:
        @dk.hookimpl
        def register_models(self, register: Any) -> None:
            register(OWN_MODEL, loader)

    plugin = Plugin()
    dk.register_plugin(plugin)
    try:
        return main(list(args))
    finally:
        dk.unregister_plugin(plugin)

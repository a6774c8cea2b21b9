"""The examples of README.md and docs/*.md: found, run, and their shown CLI outputs regenerated.

Three kinds of fenced block take part:

- ```python and ```pycon blocks run in order, one namespace per page, each page in a process of
  its own (`python tests/doc_examples.py --run PAGE... --report FILE` forks one per page once torch
  and decodekit are imported): each page is self-contained. A block whose first line is
  `# not tested: REASON` is skipped, visibly, with its reason (keep those few).
- A block (python, toml) whose first line is `# file: DIST/PATH` is a file of an example
  plugin: the files of all pages are written out, each `DIST` is installed before the pages run,
  and its `tests/` run under pytest. A path shown on two pages must be shown the same.
- ```console blocks with `$ decodekit ...` lines: each command's output as the command prints it,
  run with `COLUMNS=100` in a scratch directory (with the repository's `tests/` linked in). A
  `decodekit` command (after variable assignments, before a `| head -N` or `| tail -N`) runs in this process
  (`cli_runner.run_cli`, as a new process would run it); any other command in bash.
  `make docs-outputs` (`python tests/doc_examples.py --update`) rewrites them from real runs;
  the tests fail when one differs. Timings (tokens/s, seconds) are masked when comparing, and
  floats printed in full (six decimals or more) agree to a relative 1e-5: a float32 sum's last
  bits depend on the CPU (the shown `explain` outputs differ there on an AVX-512 machine from
  the one that made them).
"""

from __future__ import annotations

import argparse
import ast
import doctest
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from cli_runner import run_cli
from uninstalled import uninstall

from decodekit.hookspecs import ENTRY_POINT_GROUP
from decodekit.standard_plugins import canonical_name

ROOT = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"#\s*not tested:\s*(?P<reason>.+)")
FILE = re.compile(r"#\s*file:\s*(?P<path>[\w.-]+/\S+)")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
# Numbers that differ between two runs of the same command.
VOLATILE = re.compile(r'("(?:tokens_per_second|seconds)": )[0-9.]+|[0-9.]+( tokens/s)')
FULL_FLOAT = re.compile(r"-?\d+\.\d{6,}(?:e[-+]?\d+)?")
COLUMNS = "100"


def pages() -> list[Path]:
    """README.md and every page of docs/ (generated API pages have no examples)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    line: int  # the 1-based line of the block's first line of content
    body: str  # dedented content
    start: int  # offsets of the raw content in the page, for rewriting
    end: int
    indent: str

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    @property
    def first_line(self) -> str:
        return self.body.split("\n", 1)[0]

    @property
    def skip_reason(self) -> str | None:
        m = SKIP.fullmatch(self.first_line.strip())
        return m["reason"] if m else None

    @property
    def file_path(self) -> str | None:
        m = FILE.fullmatch(self.first_line.strip())
        return m["path"] if m else None


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("body")) + 1
        body = textwrap.dedent(m["body"]) if m["indent"] else m["body"]
        lang = (m["info"].split() or [""])[0]
        found.append(Block(page, lang, line, body, m.start("body"), m.end("body"), m["indent"]))
    return found


def code_blocks(page: Path) -> list[Block]:
    """The python and pycon blocks a page runs, in order (plugin files are installed instead)."""
    return [b for b in blocks(page) if b.lang in ("python", "pycon") and b.file_path is None]


# -- example plugins -------------------------------------------------------------------


def plugin_files() -> dict[str, str]:
    """Every `# file:` block of every page, by path; a path shown twice must be shown the same."""
    files: dict[str, str] = {}
    where: dict[str, str] = {}
    for page in pages():
        for b in blocks(page):
            path = b.file_path
            if path is None:
                continue
            if path in files and files[path] != b.body:
                raise AssertionError(f"{b.where} shows {path} differently from {where[path]}")
            files[path], where[path] = b.body, b.where
    return files


def write_plugins(into: Path) -> list[Path]:
    """Write the example plugins under `into`; their distribution folders."""
    dists = set()
    for path, body in plugin_files().items():
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
        dists.add(into / path.split("/", 1)[0])
    return sorted(dists)


def install_plugins(dists: list[Path], target: Path) -> None:
    """Build and install each example plugin (its metadata, so entry points work) into `target`."""
    if dists:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target)]
            + [str(d) for d in dists],
            check=True,
            capture_output=True,
            text=True,
        )


# -- python and pycon blocks -------------------------------------------------------------


def _run_python(block: Block, namespace: dict[str, object]) -> None:
    tree = ast.parse(block.body, filename=str(block.page))
    ast.increment_lineno(tree, block.line - 1)  # tracebacks point at the page's own lines
    exec(compile(tree, str(block.page), "exec"), namespace)


def _run_pycon(block: Block, namespace: dict[str, object]) -> None:
    test = doctest.DocTestParser().get_doctest(block.body, namespace, block.where, str(block.page), block.line - 1)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    if runner.failures:
        raise AssertionError(f"{block.where}: {runner.failures} pycon example(s) differ from what they print")


def run_page(page: Path) -> None:
    """Run a page's blocks in order in one namespace; print each skipped block with its reason."""
    import torch

    torch.set_num_threads(1)  # tiny models: one thread is fastest, and kind to a shared machine
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in code_blocks(page):
        if block.skip_reason is not None:
            print(f"skipped {block.where}: {block.skip_reason}")
            continue
        (_run_pycon if block.lang == "pycon" else _run_python)(block, namespace)


def run_pages(pages: list[Path], report: Path) -> None:
    """Run each page in a process of its own, forked from this one once torch and decodekit are
    imported (a new interpreter costs seconds), in a folder of its own under the working directory;
    write `{page: [exit status, what it printed]}` to `report` as JSON."""
    import torch

    import decodekit  # noqa: F401

    torch.set_num_threads(1)
    results: dict[str, tuple[int, str]] = {}
    for i, page in enumerate(pages):
        folder = Path(f"{i}-{page.stem}").resolve()
        folder.mkdir()
        with tempfile.TemporaryFile("w+") as out:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the page's process: its output into `out`
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                os.chdir(folder)
                status = 0
                try:
                    run_page(page)
                except BaseException:
                    traceback.print_exc()
                    status = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
            _, wait_status = os.waitpid(pid, 0)
            out.seek(0)
            results[str(page)] = (os.waitstatus_to_exitcode(wait_status), out.read())
    report.write_text(json.dumps(results))


# -- console blocks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    block: Block
    command: str
    output: str  # as shown, lines stripped of trailing blanks


def shown_commands(page: Path) -> Iterator[Shown]:
    for block in blocks(page):
        if block.lang != "console":
            continue
        for command, output in _commands(block.body):
            yield Shown(block, command, output)


def _commands(body: str) -> list[tuple[str, str]]:
    """`$ command` lines (a trailing backslash continues one) with the lines after each."""
    found: list[tuple[str, list[str]]] = []
    lines = body.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command += "\n" + lines[i]
            found.append((command, []))
        elif found:
            found[-1][1].append(lines[i])
        i += 1
    return [(c, _clean("\n".join(out))) for c, out in found]


def _clean(output: str) -> str:
    # The command line names the checkout decodekit was installed from (install hints): the same on every machine
    output = output.replace(str(ROOT), "/path/to/decodekit")
    return "\n".join(line.rstrip() for line in output.rstrip().split("\n")).strip("\n") if output.strip() else ""


def masked(output: str) -> str:
    return VOLATILE.sub(lambda m: (m[1] or "") + "…" + (m[2] or ""), output)


def agree(shown: str, printed: str) -> bool:
    """The shown output is what was printed: timings masked, full floats equal to a relative 1e-5."""
    shown, printed = masked(shown), masked(printed)
    if FULL_FLOAT.sub("#", shown) != FULL_FLOAT.sub("#", printed):
        return False
    pairs = zip(FULL_FLOAT.findall(shown), FULL_FLOAT.findall(printed))
    return all(abs(float(a) - float(b)) <= 1e-5 * max(abs(float(a)), abs(float(b))) for a, b in pairs)


def scratch_dir(base: Path) -> Path:
    """Where commands run: empty but for a link to the repository's tests/ (the docs use `PYTHONPATH=tests`)."""
    base.mkdir(parents=True, exist_ok=True)
    link = base / "tests"
    if not link.exists():
        link.symlink_to(ROOT / "tests")
    return base


def command_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECODEKIT_", "PYTEST_"))}
    env.pop("PYTHONPATH", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = COLUMNS
    env["LINES"] = "50"
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    return env


@dataclass(frozen=True)
class DecodekitCommand:
    """`[NAME=value ...] decodekit ARGS [| head -N | tail -N]`: what `run_command` runs in this process."""

    env: dict[str, str]
    argv: list[str]
    head: int | None
    tail: int | None = None


_SHELL_OPERATORS = set("|&;<>()")


def decodekit_command(command: str) -> DecodekitCommand | None:
    """The command as `DecodekitCommand`, or None when it needs a shell (anything else)."""
    command = command.replace("\\\n", " ")
    cut: dict[str, int] = {}
    m = re.fullmatch(r"(?P<rest>.*\S)\s*\|\s*(?P<cut>head|tail)\s+-(?:n\s*)?(?P<n>\d+)\s*", command, re.S)
    if m is not None:
        command, cut = m["rest"], {m["cut"]: int(m["n"])}
    lexer = shlex.shlex(command, posix=False, punctuation_chars="".join(_SHELL_OPERATORS))
    lexer.whitespace_split = True
    raw = list(lexer)  # quotes kept: an operator is a token of its own, unquoted
    if any(set(token) <= _SHELL_OPERATORS or "$" in token or "`" in token for token in raw):
        return None
    words = shlex.split(command)
    env = {}
    while words and re.match(r"[A-Za-z_]\w*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or words[0] != "decodekit":
        return None
    return DecodekitCommand(env, words[1:], cut.get("head"), cut.get("tail"))


def run_command(command: str, cwd: Path) -> str:
    """What `command` prints, stdout and stderr together, as a terminal would show them."""
    parsed = decodekit_command(command)
    if parsed is None:
        r = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=command_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        return _clean(r.stdout)
    env = {**command_env(), **parsed.env}
    extra_path = [str(cwd / p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = extra_path  # PYTHONPATH=tests: the test plugin, as a new process would find it
    try:
        piped = parsed.head is not None or parsed.tail is not None
        with pytest.MonkeyPatch.context() as patch:
            uninstall(patch, *third_party_plugins())  # the pages show a checkout's own plugins, not a user's extras
            r = run_cli(parsed.argv, env, cwd=cwd, merge=not piped, fresh_plugins=True)
    finally:
        del sys.path[: len(extra_path)]
    lines = r.stdout.splitlines(keepends=True)
    if parsed.head is not None:
        return _clean("".join(lines[: parsed.head]) + r.stderr)
    if parsed.tail is not None:  # tail prints once stdout ends: after what went to stderr
        return _clean(r.stderr + "".join(lines[max(0, len(lines) - parsed.tail) :]))
    return _clean(r.stdout)


def third_party_plugins() -> list[str]:
    """The installed plugin distributions this repository does not hold (a user's own, or one they installed)."""
    own = {canonical_name(p.name) for p in (ROOT / "plugins").iterdir()} | {"decodekit"}
    plugins = (d for d in metadata.distributions() if any(e.group == ENTRY_POINT_GROUP for e in d.entry_points))
    return sorted({canonical_name(d.metadata["Name"] or "") for d in plugins} - own)


def run_commands(shown: list[Shown], cwd: Path) -> list[str]:
    """Each command's output, in order (one may write a file the next reads)."""
    return [run_command(s.command, cwd) for s in shown]


def update_outputs(cwd: Path) -> list[Path]:
    """Rewrite every shown output from a real run; the pages that changed."""
    changed = []
    for page in pages():
        shown = list(shown_commands(page))
        if not shown:
            continue
        outputs = iter(run_commands(shown, cwd))
        text = page.read_text()
        pieces, last = [], 0
        for block in [b for b in blocks(page) if b.lang == "console"]:
            lines = []
            for command, _ in _commands(block.body):
                out = next(outputs)
                lines.append("$ " + command)
                lines.extend(out.split("\n") if out else [])
            body = "".join(f"{block.indent}{line}\n" if line else "\n" for line in lines)
            pieces += [text[last : block.start], body]
            last = block.end
        new = "".join([*pieces, text[last:]])
        if new != text:
            page.write_text(new)
            changed.append(page)
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--run", type=Path, nargs="+", help="run the python and pycon blocks of these pages")
    group.add_argument("--update", action="store_true", help="regenerate every shown CLI output")
    parser.add_argument("--report", type=Path, help="with --run: each page in a process, the outcomes to this file")
    args = parser.parse_args()
    if args.run and args.report:
        run_pages([page.resolve() for page in args.run], args.report)
        return
    if args.run:
        for page in args.run:
            run_page(page.resolve())
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        changed = update_outputs(scratch_dir(Path(tmp)))
    print("updated: " + (", ".join(str(p.relative_to(ROOT)) for p in changed) or "nothing"))


if __name__ == "__main__":
    main()

"""Every `decodekit COMMAND` the README and docs name in running text is a command the CLI has, with its options.

Shown commands (```console blocks) run in test_docs.py; a command named in a sentence ran nowhere, and
docs/hf.md named `decodekit batch`, which never existed (a batch job is `decodekit generate --input`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from decodekit_cli.app import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("plugins/*/README.md"))]
NOT_COMMANDS = {"error"}  # docs/reliability.md: the fuzzer's outcome "`decodekit error`", an exception's kind


def test_the_docs_name_only_commands_the_cli_has() -> None:
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    named = {
        (page.relative_to(ROOT).as_posix(), word)
        for page in PAGES
        for word in re.findall(r"(?:^\$ |`)decodekit ([a-z][a-z-]*)", page.read_text(), re.MULTILINE)
    }
    assert named, "no command found: the pattern no longer matches the docs"
    assert sorted((page, word) for page, word in named if word not in commands | NOT_COMMANDS) == []


def _commands(text: str) -> list[str]:
    return re.findall(r"`(decodekit [^`]+)`", text) + re.findall(r"^\s*(?:\$ )?(decodekit [a-z].*)$", text, re.M)


def _unknown_options(text: str) -> list[tuple[str, str]]:
    """(command, option) for each `--option` a `decodekit ...` command in `text` gives that its (sub)command lacks:
    in code spans, `$ ` lines and command lines of code blocks (the part before a pipe)."""
    root: Any = typer.main.get_command(app)
    unknown = []
    for span in _commands(text):
        words = span.split(" | ")[0].split()
        command, i = root, 1
        while i < len(words) and words[i] in getattr(command, "commands", {}):
            command, i = command.commands[words[i]], i + 1
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        unknown += [(span, w) for w in words[i:] if re.match(r"--?[a-z]", w) and w.split("=")[0] not in options]
    return unknown


def test_the_options_the_docs_give_a_command_are_options_it_has() -> None:
    """Commands in running text run nowhere: an option renamed or dropped would stay in them unnoticed."""
    found = [(page.relative_to(ROOT).as_posix(), *bad) for page in PAGES for bad in _unknown_options(page.read_text())]
    assert sum(len(_commands(page.read_text())) for page in PAGES) > 100, "the pattern no longer matches the docs"
    assert found == []
    assert _unknown_options("run `decodekit generate ROMEO: --seed 0 --tempreature 0.8`") == [
        ("decodekit generate ROMEO: --seed 0 --tempreature 0.8", "--tempreature")
    ]
    assert _unknown_options("`decodekit cache calibrate --model x --windows 3 --window 2`")[0][1] == "--window"

"""Every `decodekit COMMAND` the README and docs name in running text is a command the CLI has.

Shown commands (```console blocks) run in test_docs.py; a command named in a sentence ran nowhere, and
docs/hf.md named `decodekit batch`, which never existed (a batch job is `decodekit generate --input`)."""

from __future__ import annotations

import re
from pathlib import Path

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

"""`generate --json-schema FILE`, `--regex PATTERN`, `--grammar FILE`: a grammar stage (decodekit-grammar)
put first in the chain, written as the chain string's own stage so every path that reads a chain (the
batch mode's default, `--json` output) sees it."""

from __future__ import annotations

import json
from pathlib import Path

from decodekit_cli.errors import CliError
from decodekit_cli.options import chain_text

__all__ = ["grammar_stage", "with_grammar"]


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{option} {str(path)!r}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None


def grammar_stage(json_schema: Path | None, regex: str | None, grammar: Path | None) -> str | None:
    """The stage the grammar options ask for, in chain-string form; None without them."""
    given = [
        name for name, value in (("--json-schema", json_schema), ("--regex", regex), ("--grammar", grammar)) if value
    ]
    if len(given) > 1:
        raise CliError(f"{' and '.join(given)} cannot be combined; a sample follows one grammar")
    if json_schema is not None:
        text = _read(json_schema, "--json-schema")
        try:
            json.loads(text)
        except ValueError as exc:
            raise CliError(f"--json-schema {str(json_schema)!r}: not JSON: {exc}") from None
        return f"json_schema(schema={text.strip()!r})"
    if regex is not None:
        return f"regex(pattern={regex!r})"
    if grammar is not None:
        return f"grammar(lark={_read(grammar, '--grammar')!r})"
    return None


def with_grammar(
    chain: str | None, flags: dict[str, float | int | None], stage: str | None
) -> tuple[str | None, dict[str, float | int | None]]:
    """`--chain` and the sampling flags with the grammar stage first (the flags then written into the chain)."""
    if stage is None:
        return chain, flags
    return f"{stage} | {chain_text(chain, flags)}", dict.fromkeys(flags)

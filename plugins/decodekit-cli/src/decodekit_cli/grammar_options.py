"""`generate --json-schema FILE`, `--regex PATTERN`, `--grammar FILE` (GBNF for a `.gbnf` file, as llama.cpp's
`--grammar-file` reads it; Lark otherwise), and an `--input` line's `json_schema`, `regex`, `grammar` (Lark) or
`gbnf`: a grammar stage (decodekit-grammar) put first in the chain, written as the chain
string's own stage (`SamplingOptions.grammar`, put first in whatever chain the options give) so every path that
reads a chain (the batch mode's default, records, `--json`) sees it."""

from __future__ import annotations

import json
from pathlib import Path

from decodekit_cli.errors import CliError

__all__ = ["grammar_stage", "line_chain"]

NESTING = "JSON nested less deeply (llguidance takes a schema about 128 levels deep)"


def _read(path: Path, option: str, stage: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        # an --input line takes the text itself, so a user may pass it here too: say where it goes
        raise CliError(
            f"{option} {str(path)!r}: cannot read it: {reason}; allowed: a file that holds it "
            f'(the text itself goes in --chain: "{stage}")'
        ) from None


def _one(**given: object) -> None:
    """At most one grammar is given (the keywords: what each is called where it was given)."""
    named = [name for name, value in given.items() if value is not None]
    if len(named) > 1:
        raise CliError(f"{' and '.join(named)} cannot be combined; a sample follows one grammar")


def _stage(schema: str | None, regex: str | None, lark: str | None, gbnf: str | None) -> str | None:
    """The stage for one of a JSON Schema (its JSON text), a regex, a Lark and a GBNF grammar; None for none."""
    if schema is not None:
        return f"json_schema(schema={schema.strip()!r})"
    if regex is not None:
        return f"regex(pattern={regex!r})"
    if gbnf is not None:
        return f"grammar(gbnf={gbnf!r})"
    return None if lark is None else f"grammar(lark={lark!r})"


def _check(path: Path, option: str, stage: str, **params: str) -> None:
    """Build the file's stage once, so that a grammar it refuses is said of the option and file; the chain's own
    build would name the stage alone ("json_schema: schema is invalid: ...")."""
    from decodekit.errors import DecodekitError
    from decodekit.plugins import create, get_registry

    if stage not in get_registry().samplers:
        return  # decodekit-grammar missing: the options' check (`SamplingOptions.check`) says what to install
    try:
        create(stage, **params)
    except DecodekitError as exc:
        raise CliError(f"{option} {str(path)!r}: {exc}") from None


def grammar_stage(json_schema: Path | None, regex: str | None, grammar: Path | None) -> str | None:
    """The stage the grammar options ask for, in chain-string form; None without them."""
    _one(**{"--json-schema": json_schema, "--regex": regex, "--grammar": grammar})
    schema = lark = gbnf = None
    if json_schema is not None:
        schema = _read(json_schema, "--json-schema", "json_schema(schema='...')")
        try:
            json.loads(schema)
        except ValueError as exc:
            raise CliError(f"--json-schema {str(json_schema)!r}: not JSON: {exc}") from None
        except RecursionError:  # Python's parser, past its recursion limit
            deep = f"--json-schema {str(json_schema)!r}: JSON nested too deeply to read; allowed: {NESTING}"
            raise CliError(deep) from None
        _check(json_schema, "--json-schema", "json_schema", schema=schema)
    if grammar is not None and grammar.suffix == ".gbnf":  # llama.cpp's grammar files
        gbnf = _read(grammar, "--grammar", "grammar(gbnf='...')")
        _check(grammar, "--grammar", "grammar", gbnf=gbnf)
    elif grammar is not None:
        lark = _read(grammar, "--grammar", "grammar(lark='...')")
        _check(grammar, "--grammar", "grammar", lark=lark)
    return _stage(schema, regex, lark, gbnf)


# decodekit-grammar's stages: a line's own grammar stands in for these in the job's chain.
GRAMMARS = ("json_schema", "json", "regex", "grammar")


def line_chain(chain: str, json_schema: object, regex: str | None, grammar: str | None, gbnf: str | None) -> str:
    """An `--input` line's chain with the line's own grammar first: `json_schema` (an object, or its JSON text),
    `regex`, `grammar` (Lark text) or `gbnf` (GBNF text), in place of the chain's grammar stages (`--json-schema`:
    a sample follows one grammar, and two have no text in common); the chain as it is without one."""
    _one(json_schema=json_schema, regex=regex, grammar=grammar, gbnf=gbnf)
    schema = json.dumps(json_schema) if isinstance(json_schema, dict | bool) else json_schema
    stage = _stage(None if schema is None else str(schema), regex, grammar, gbnf)
    if stage is None:
        return chain
    from decodekit.chain import stage_label  # torch: imported only for a line with a grammar
    from decodekit_cli.batch_settings import parsed_chain

    parsed = parsed_chain(chain)
    if not any(getattr(s, "name", None) in GRAMMARS for s in parsed.processors):
        return f"{stage} | {chain}"  # the chain as written
    rest = [s for s in (*parsed.processors, parsed.selector) if getattr(s, "name", None) not in GRAMMARS]
    return " | ".join([stage, *map(stage_label, rest)])

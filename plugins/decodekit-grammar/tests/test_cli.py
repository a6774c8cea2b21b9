"""`decodekit generate --json-schema FILE`, `--regex PATTERN`, `--grammar FILE`: the stage first in the chain,
in text and JSON output; bad files and grammars in one line; the stages in `decodekit plugins` and `samplers`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from decodekit_cli import main

SCHEMA = {
    "type": "object",
    "properties": {"who": {"type": "string", "pattern": "^[A-Z][a-z]{1,7}$"}, "act": {"enum": [1, 2, 3]}},
    "required": ["who", "act"],
    "additionalProperties": False,
}


LIST_GRAMMAR = 'start: "[" WORD ("," WORD){0,2} "]"\nWORD: /[a-z]{1,5}/\n'


def generate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["generate", "ROMEO:", "--seed", "0", "--max-new-tokens", "40", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_json_schema_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA, indent=2))
    status, out, err = generate(capsys, "--json-schema", str(path), "--temperature", "0.8", "--json")
    assert status == 0, err
    document = json.loads(out)
    [sample] = document["samples"]
    jsonschema.validate(json.loads(sample["text"]), SCHEMA)
    assert (sample["finish_reason"], sample["stopped_by"]) == ("stop", "json_schema")
    assert document["chain"].startswith("json_schema(schema=") and document["chain"].endswith(
        "temperature(value=0.8) | sample"
    )


def test_regex_and_lark_grammar(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = generate(capsys, "--regex", "(thou|thee) [a-z]{1,8}[.!]", "--no-echo")
    assert status == 0, err
    assert re.fullmatch(r"(thou|thee) [a-z]{1,8}[.!]\n?", out), out
    lark = tmp_path / "list.lark"
    lark.write_text('start: "[" WORD ("," WORD){0,2} "]"\nWORD: /[a-z]{1,5}/\n')
    status, out, err = generate(capsys, "--grammar", str(lark), "--chain", "top_k(5) | greedy", "--no-echo")
    assert status == 0, err
    assert re.fullmatch(r"\[[a-z]{1,5}(,[a-z]{1,5}){0,2}\]\n?", out), out


LIST_GBNF = 'root ::= "[" word ("," word){0,2} "]"\nword ::= [a-z]{1,5}\n'


def test_a_gbnf_file_is_read_as_gbnf(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """llama.cpp's extension: a `.gbnf` file is GBNF (it was read as Lark, and refused); another file is Lark."""
    gbnf = tmp_path / "list.gbnf"
    gbnf.write_text(LIST_GBNF)
    status, out, err = generate(capsys, "--grammar", str(gbnf), "--chain", "top_k(5) | greedy", "--json")
    assert status == 0, err
    [sample] = json.loads(out)["samples"]
    assert re.fullmatch(r"\[[a-z]{1,5}(,[a-z]{1,5}){0,2}\]", sample["text"]), sample
    assert json.loads(out)["chain"].startswith(f"grammar(lark=None, gbnf={LIST_GBNF!r}) | top_k(")
    other = tmp_path / "list.txt"
    other.write_text(LIST_GBNF)
    status, _, err = generate(capsys, "--grammar", str(other))
    assert status == 2 and f"--grammar {str(other)!r}: grammar: lark is invalid: " in err
    assert "or this one as gbnf= (grammar(gbnf=...); the command line reads a .gbnf file as GBNF)" in err


def test_a_grammar_unfinished_at_the_length_is_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = generate(capsys, "--regex", "[a-z]{30}", "--max-new-tokens", "5")
    assert status == 0
    assert "decodekit: warning: 1 of 1 rows ended with regex incomplete: rows 0 (length)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--regex", "a(b"], r"^decodekit: error: regex: pattern is invalid: .*unclosed group"),
        (["--json-schema", "missing.json"], r"^decodekit: error: --json-schema 'missing.json': cannot read it"),
        # the schema's text itself, as an --input line takes it: the error says where that goes
        (
            ["--json-schema", '{"type": "integer"}'],
            r"""^decodekit: error: --json-schema '{"type": "integer"}': cannot read it: No such file or directory; """
            r"""allowed: a file that holds it \(the text itself goes in --chain: "json_schema\(schema='\.\.\.'\)"\)$""",
        ),
        (["--grammar", 'start: "a"'], r"""^decodekit: error: .* goes in --chain: "grammar\(lark='\.\.\.'\)"\)$"""),
        (["--regex", "a", "--grammar", "x.lark"], r"^decodekit: error: --regex and --grammar cannot be combined"),
    ],
)
def test_bad_grammar_options_in_one_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    status, _, err = generate(capsys, *args)
    assert status == 2
    [line] = err.splitlines()
    assert re.match(message, line), line


def test_a_schema_file_that_is_not_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text("{type: object}")
    status, _, err = generate(capsys, "--json-schema", str(path))
    assert status == 2 and "not JSON: Expecting property name" in err


@pytest.mark.parametrize(
    ("option", "name", "text", "problem"),
    [
        ("--json-schema", "bad.json", '{"type": "strin"}', "Invalid type: strin"),
        ("--grammar", "bad.lark", 'start: "a" WORD\n', "WORD"),
        (
            "--grammar",
            "bad.gbnf",
            "root ::= word\n",
            "grammar: gbnf is invalid: not GBNF that llguidance's converter reads: Rule 'word' not found",
        ),
    ],
)
def test_an_invalid_grammar_file_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, name: str, text: str, problem: str
) -> None:
    """A file that reads (and is JSON) but holds no valid grammar: the error named the stage alone
    ("json_schema: schema is invalid: ..."), not the option and file the unreadable file's error names."""
    path = tmp_path / name
    path.write_text(text)
    status, _, err = generate(capsys, option, str(path))
    assert status == 2
    [line] = err.splitlines()
    assert line.startswith(f"decodekit: error: {option} {str(path)!r}: ") and problem in line, line


def test_the_stages_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    assert "decodekit-grammar" in capsys.readouterr().out
    assert main(["samplers"]) == 0
    listing = capsys.readouterr().out
    for name in ("json_schema", "json", "regex", "grammar"):
        assert re.search(rf"\b{name}\b", listing), name


def test_input_lines_with_their_own_grammars(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--input` lines: `json_schema` (an object or its text), `regex`, `grammar`, `gbnf`; a bad one is its error
    record."""
    lines = [
        {"prompt": "ROMEO:", "id": "schema", "json_schema": SCHEMA},
        {"prompt": "ROMEO:", "id": "text", "json_schema": json.dumps(SCHEMA)},
        {"prompt": "JULIET:", "id": "regex", "regex": "(thou|thee) [a-z]{1,8}[.!]"},
        {"prompt": "NURSE:", "id": "lark", "grammar": 'start: "[" WORD ("," WORD){0,2} "]"\nWORD: /[a-z]{1,5}/'},
        {"prompt": "NURSE:", "id": "gbnf", "gbnf": LIST_GBNF},
        {"prompt": "NURSE:", "id": "bad gbnf", "gbnf": "root ::= word"},
        {"prompt": "NURSE:", "id": "plain", "max_new_tokens": 5},
        {"prompt": "NURSE:", "id": "two", "regex": "a", "grammar": 'start: "a"'},
        {"prompt": "NURSE:", "id": "bad", "regex": "a(b"},
        {"prompt": "ROMEO:", "id": "true", "json_schema": True, "max_new_tokens": 8},  # JSON Schema's any value
        {"prompt": "ROMEO:", "id": "false", "json_schema": False},  # and its no value
    ]
    source, output = tmp_path / "prompts.jsonl", tmp_path / "results.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["generate", "--input", str(source), "--output", str(output), "--seed", "0", "--max-new-tokens", "60"]
    assert main([*args, "--on-error", "skip"]) == 0, capsys.readouterr().err
    records = {r["id"]: r for r in map(json.loads, output.read_text().splitlines())}
    for key in ("schema", "text"):
        jsonschema.validate(json.loads(records[key]["text"]), SCHEMA)
        assert records[key]["stopped_by"] == "json_schema" and records[key]["chain"].startswith("json_schema(")
    assert re.fullmatch(r"(thou|thee) [a-z]{1,8}[.!]", records["regex"]["text"])
    assert re.fullmatch(r"\[[a-z]{1,5}(,[a-z]{1,5}){0,2}\]", records["lark"]["text"])
    assert re.fullmatch(r"\[[a-z]{1,5}(,[a-z]{1,5}){0,2}\]", records["gbnf"]["text"])
    assert records["gbnf"]["chain"].startswith("grammar(gbnf=")
    assert records["bad gbnf"]["error"]["message"] == (
        "grammar: gbnf is invalid: not GBNF that llguidance's converter reads: Rule 'word' not found"
    )
    assert records["plain"]["chain"] == "temperature(0.8) | top_p(0.95)"
    assert records["two"]["error"]["message"] == "regex and grammar cannot be combined; a sample follows one grammar"
    assert records["bad"]["error"]["type"] == "ParameterError"
    assert records["bad"]["error"]["message"].startswith("regex: pattern is invalid:")
    assert records["true"]["chain"].startswith("json_schema(schema='true') | ") and "error" not in records["true"]
    assert records["false"]["error"]["message"].startswith("json_schema: schema=false matches no JSON value")


def test_explain_says_when_a_grammar_ended_the_decode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`regex(pattern='ab')` ends the row after 2 of the 4 steps asked: explain says so, and a --plot-step past
    the end is refused in one line (it was an unexpected IndexError)."""
    explain = ["explain", "ROMEO:", "--chain", "regex(pattern='ab') | greedy", "--steps", "4"]
    assert main(explain) == 0
    assert capsys.readouterr().out.rstrip().endswith("ended after step 1: stopped by regex")
    assert main([*explain, "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [(s["text"], s["ended_by"]) for s in steps] == [("a", None), ("b", "regex")]
    assert main([*explain, "--plot", str(tmp_path / "p.png"), "--plot-step", "3"]) == 2
    assert capsys.readouterr().err == (
        "decodekit: error: --plot-step 3: the decode ended after 2 steps (stopped by regex); allowed: 0 <= step < 2\n"
    )


@pytest.mark.parametrize(
    ("option", "text", "stage", "pattern"),
    [
        ("--json-schema", '{"type": "boolean"}', "json_schema", r"true|false"),
        ("--regex", None, "regex", r"(thou|thee) [a-z]{1,8}[.!]"),
        ("--grammar", LIST_GRAMMAR, "grammar", r"\[[a-z]{1,5}(,[a-z]{1,5}){0,2}\]"),
    ],
)
def test_explain_takes_the_grammar_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, text: str | None, stage: str, pattern: str
) -> None:
    """`explain` had no --json-schema, --regex or --grammar (only --chain): its steps are generate's, grammar first."""
    value = pattern if text is None else str(tmp_path / "grammar")
    if text is not None:
        (tmp_path / "grammar").write_text(text)
    explain = ["explain", "ROMEO:", option, value, "--chain", "top_k(5) | greedy", "--steps", "30", "--json"]
    assert main(explain) == 0, capsys.readouterr().err
    document = json.loads(capsys.readouterr().out)
    assert document["chain"].startswith(f"{stage}(") and document["chain"].endswith("top_k(k=5) | greedy")
    steps = document["steps"]
    assert re.fullmatch(pattern, "".join(s["text"] for s in steps)) and steps[-1]["ended_by"] == stage
    assert main(["generate", "ROMEO:", option, value, "--chain", "top_k(5) | greedy", "--no-echo"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == "".join(s["text"] for s in steps)  # the steps generate takes


def test_input_lines_a_grammar_left_unfinished_are_named_each(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before: the engine's "1 of 1 rows ended with regex incomplete: rows 0 (length)", a row of a batch no line
    is, and once for the two lines (their batches differ by length; Python shows one text once); then without
    naming the input file, as the job's other messages about a line do."""
    lines = [
        {"prompt": "ROMEO:", "id": "a", "regex": "[a-z]{30}", "max_new_tokens": 5},
        {"prompt": "ROMEO:", "id": "b", "max_new_tokens": 5},
        {"prompt": "JULIET:", "id": "c", "regex": "[a-z]{30}", "max_new_tokens": 6},
    ]
    source, output = tmp_path / "prompts.jsonl", tmp_path / "results.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["generate", "--input", str(source), "--output", str(output), "--seed", "0"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "incomplete" in line]
    assert said == [
        "decodekit: warning: --input prompts.jsonl line 1 (id 'a') ended with regex incomplete (length)",
        "decodekit: warning: --input prompts.jsonl line 3 (id 'c') ended with regex incomplete (length)",
    ]
    records = [json.loads(text) for text in output.read_text().splitlines()]
    assert [r["finish_reason"] for r in records] == ["length"] * 3  # what the warnings say of lines a and c


def test_a_lines_grammar_replaces_the_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--json-schema` for the job and a line's own `regex` gave that line both grammars, whose overlap was empty: a
    NumericsError at decode time naming both. A line's grammar now stands in for the command's (a sample follows one
    grammar), as a line's `chain` stands in for the command's chain; lines without one keep the command's."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    lines = [
        {"prompt": "JULIET:", "id": "own", "regex": "(thou|thee) [a-z]{1,8}[.!]"},
        {"prompt": "ROMEO:", "id": "job"},
    ]
    source, output = tmp_path / "prompts.jsonl", tmp_path / "results.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["generate", "--input", str(source), "--output", str(output), "--seed", "0", "--max-new-tokens", "60"]
    assert main([*args, "--json-schema", str(schema), "--chain", "top_k(k=20)"]) == 0, capsys.readouterr().err
    records = {r["id"]: r for r in map(json.loads, output.read_text().splitlines())}
    assert re.fullmatch(r"(thou|thee) [a-z]{1,8}[.!]", records["own"]["text"])
    assert records["own"]["chain"] == "regex(pattern='(thou|thee) [a-z]{1,8}[.!]') | top_k(k=20) | sample"
    jsonschema.validate(json.loads(records["job"]["text"]), SCHEMA)
    assert records["job"]["chain"].startswith("json_schema(") and records["job"]["chain"].endswith(" | top_k(k=20)")


def test_one_line_failing_while_decoding_is_told_in_the_singular(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A line's two grammars with no text in common fail at its first step; the job said "1 line ... have no
    record ... retries them"."""
    source, output = tmp_path / "prompts.jsonl", tmp_path / "results.jsonl"
    source.write_text(json.dumps({"prompt": "ROMEO:", "chain": "regex(pattern='a+') | regex(pattern='b+')"}) + "\n")
    assert main(["generate", "--input", str(source), "--output", str(output), "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert "1 line failed while decoding and has no record; the others are written. --resume retries it;" in err


def test_a_line_whose_grammar_the_tokenizer_cannot_spell_is_refused_before_any_generation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """tiny-shakespeare has no "é": the line's check (`dk.validate`) finds it, so `--on-error fail` stops the job
    before any line is generated, as for any bad line. It was found at the line's first step: the other line was
    written first, and with `--on-error skip` the line got an error record without a warning."""
    source, output = tmp_path / "prompts.jsonl", tmp_path / "results.jsonl"
    lines = [{"prompt": "ROMEO:", "regex": "[a-z]{3}"}, {"prompt": "JULIET:", "regex": "é+"}]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["generate", "--input", str(source), "--output", str(output), "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert "line 2: regex: the grammar cannot be used with this tokenizer: no token of it can begin" in err, err
    assert not output.exists() or output.read_text() == ""

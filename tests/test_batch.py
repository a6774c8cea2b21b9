"""`decodekit generate --input prompts.jsonl --output results.jsonl`: one record per line, nothing lost,
nothing twice.

Runs the CLI in subprocesses with the tiny `cli-test-gpt` model (see test_cli.py) and the
`batch_testplugin` (a model that must not load, a sampler that fails on some prompts). Each
hostile input of issue 24 is here with the exact records it must give; a result is compared with
the same line's result from a clean file, since a line's seed depends only on its number.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
from cli_runner import run_cli
from decodekit_cli.batch_input import InputLine, LineError, parse_line
from test_cli import MODEL, TESTS, _env, _popen, cli, cli_many

import decodekit as dk

N = 200
ARGS = ["-m", MODEL, "--seed", "11", "--max-new-tokens", "6", "--temperature", "1.5", "--cache", "none"]
DENSE = ["-m", MODEL, "--seed", "11", "--max-new-tokens", "6", "--temperature", "1.5", "--cache", "dense"]
PLUGINS = {"DECODEKIT_EXTRA_PLUGINS": "cli_testplugin,batch_testplugin"}
CONTEXT = 128  # cli-test-gpt's positions


def _prompts(path: Path) -> Path:
    """200 prompts; some name their id, seed, length or chain (which splits batches)."""
    lines = []
    for i in range(N):
        line: dict[str, object] = {"prompt": f"Line {i}: " + "abc"[: i % 4]}
        if i % 3 == 0:
            line["id"] = f"p{i}"
        if i % 7 == 0:
            line["seed"] = 1000 + i
        if i % 11 == 0:
            line["max_new_tokens"] = 3
        if i % 50 == 0:
            line["chain"] = "top_k(5) | sample"
        if i % 61 == 60:
            line["max_new_tokens"] = 0  # nothing to generate: a result all the same
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n")
    return path


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run(prompts: Path, out: Path, *args: str) -> Any:
    return cli("generate", "--input", str(prompts), "--output", str(out), *args, **PLUGINS)


def _write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _json(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def _error(record: dict[str, Any]) -> tuple[object, int, str, str]:
    return record["id"], record["line"], record["error"]["type"], record["error"]["message"]


pytestmark = pytest.mark.xdist_group("batch")  # one reference run, in one worker


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("batch")
    prompts, out = _prompts(root / "prompts.jsonl"), root / "reference.jsonl"
    r = cli("generate", "--input", str(prompts), "--output", str(out), "--batch-size", "16", *ARGS)
    assert r.returncode == 0, r.stderr
    return prompts, out.read_text()


def test_results_name_their_prompt_line_and_request(reference: tuple[Path, str]) -> None:
    results = [json.loads(line) for line in reference[1].splitlines()]
    assert [r["line"] for r in results] == list(range(1, N + 1))  # one record per line, in input order
    by_id = {r["id"]: r for r in results}
    assert by_id["p0"]["prompt"] == "Line 0: " and by_id[2]["prompt"] == "Line 1: a"  # default id: the line number
    assert (
        by_id["p0"]["seed"] == 1000
        and by_id["p0"]["max_new_tokens"] == 3
        and by_id["p0"]["chain"] == "top_k(5) | sample"
    )
    assert by_id[2]["max_new_tokens"] == 6 and by_id[2]["chain"] == "temperature(value=1.5)"
    assert all(len(r["tokens"]) == r["max_new_tokens"] and r["finish_reason"] == "length" for r in results)
    assert len({tuple(r["tokens"]) for r in results}) > N // 2  # seeds differ per prompt


def test_line_n_gets_row_n_of_one_batch_of_the_whole_file(tmp_path: Path) -> None:
    """A line's stream is the one row `line - 1` gets from --seed in one batch: two lines of one prompt are the
    rows of `dk.generate([prompt] * 2, seed=11)` (not `generate -n 2`, whose samples are line 1's `n`)."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="Line 1: a")] * 2)
    out = tmp_path / "o.jsonl"
    batch = cli("generate", "--input", str(prompts), "--output", str(out), "--batch-size", "1", *ARGS)
    assert batch.returncode == 0, batch.stderr
    model = cli_testplugin.load_model()
    rows = dk.generate(model, ["Line 1: a"] * 2, chain="temperature(1.5)", max_new_tokens=6, seed=11, cache="none")
    assert [r["tokens"] for r in _records(out)] == rows.tokens
    assert rows.tokens[0] != rows.tokens[1]


def _interrupted_run(prompts: Path, out: Path, batch_size: int) -> int:
    """Start the run, Ctrl-C it once a few results are written; the number written. A run that wrote every line
    before the Ctrl-C landed (a poll late on a loaded machine: it failed so once) is started again."""
    args = ["generate", "--input", str(prompts), "--output", str(out), "--batch-size", str(batch_size), *ARGS]
    for _ in range(3):
        p = _popen(args, _env())
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            if out.exists() and out.read_text().count("\n") >= 20:
                break
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        written = out.read_text().count("\n")
        if written < N:
            assert p.returncode == 130 and "Traceback" not in err and "--resume continues" in err, err
            return written
        for path in out.parent.glob(f"{out.name}*"):  # the output and its settings: a fresh start
            path.unlink()
    raise AssertionError("every run wrote all its lines before its Ctrl-C")


@pytest.mark.parametrize("batch_size", [1, 16])
def test_interrupted_and_resumed_equals_uninterrupted(
    reference: tuple[Path, str], tmp_path: Path, batch_size: int
) -> None:
    prompts, expected = reference
    out = tmp_path / "results.jsonl"
    written = _interrupted_run(prompts, out, batch_size)
    assert 20 <= written < N
    assert out.read_text() == "".join(expected.splitlines(keepends=True)[:written])  # nothing half-written
    with out.open("a") as f:
        f.write('{"id": "p999", "line": 999, "pro')  # as if killed in the middle of a write: resume drops it
    args = ["generate", "--input", str(prompts), "--output", str(out), "--batch-size", str(batch_size), *ARGS]
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert f"{N - written} results written" in r.stderr and f"{written} already there" in r.stderr
    assert out.read_text() == expected


def test_killed_and_resumed_equals_uninterrupted(reference: tuple[Path, str], tmp_path: Path) -> None:
    """SIGKILL, not Ctrl-C: no handler runs; the lock dies with the process and resume takes over."""
    prompts, expected = reference
    out = tmp_path / "results.jsonl"
    p = _popen(["generate", "--input", str(prompts), "--output", str(out), *ARGS], _env())
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline and not (out.exists() and out.stat().st_size > 2000):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert 0 < out.read_text().count("\n") < N
    r = cli("generate", "--input", str(prompts), "--output", str(out), *ARGS, "--resume")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == expected


# -- hostile input ----------------------------------------------------------------------------------

SEED_TOO_BIG = _json(prompt="b", seed=2**64)
PAST_CONTEXT = _json(prompt="c", max_new_tokens=CONTEXT)
OVERSIZED = _json(prompt="d", max_new_tokens=10**30)
SEED_MESSAGE = f"seed={2**64} is invalid; allowed: an integer, 0 <= seed < 2**64"


def _context_message(prompt_tokens: int, max_new: int) -> str:
    return (
        f"prompt of {prompt_tokens} tokens + max_new_tokens={max_new} = {prompt_tokens + max_new} tokens exceeds the "
        f"model's context of {CONTEXT} positions; shorten the prompt, lower max_new_tokens to "
        f"{CONTEXT - prompt_tokens} or fewer (the context less the prompt's {prompt_tokens} tokens), or --cache none, "
        "which crops the context"  # the job's flag (the library says cache='none')
        # learned positions: no evicting cache takes this model further
    )


NUMBER_AS_ID = "(its number: the id of a line that names no valid one of its own)"
HOSTILE = [
    _json(prompt="a"),
    SEED_TOO_BIG,
    PAST_CONTEXT,
    OVERSIZED,
    b'{"prompt": ',
    _json(prompt="x", temp=2),
    _json(prompt="x", chain="top_k(0)"),
    b'["ROMEO"]',
    _json(prompt="e", id=1),
    _json(prompt="f"),
]
HOSTILE_ERRORS = [
    (2, 2, "ParameterError", SEED_MESSAGE),
    (3, 3, "ContextLengthError", _context_message(1, CONTEXT)),
    (4, 4, "ContextLengthError", _context_message(1, 10**30)),
    (5, 5, "JSONDecodeError", "not JSON: Expecting value at column 12"),
    (
        6,
        6,
        "ParameterError",
        "prompt line: unknown parameter temp=2; allowed parameters: prompt, prompt_token_ids, id, seed, "
        "max_new_tokens, n, chain, logprobs, prompt_logprobs, stop, include_stop, json_schema, regex, grammar, gbnf",
    ),
    (
        7,
        7,
        "ParameterError",
        "top_k: k=0 is invalid: Input should be greater than or equal to 1; allowed: an integer 1 <= k",
    ),
    (
        8,
        8,
        "ParameterError",
        "a JSON array; allowed: an object with a 'prompt' (text) or a 'prompt_token_ids' (a list of token ids)",
    ),
    # Before: without the parenthesis, which sent a user to a line 1 that names no id (or an invalid one)
    (1, 9, "ParameterError", f"id 1 is also the id of line 1 {NUMBER_AS_ID}; allowed: one per line"),
]


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b'["ROMEO"]', "array"),
        (b'"ROMEO"', "string"),
        (b"7", "number"),
        (b"7.5", "number"),
        (b"true", "boolean"),
        (b"null", "null"),
    ],
)
def test_a_line_that_is_not_an_object_is_named_in_jsons_words(data: bytes, kind: str) -> None:
    """Python's names came out: "a JSON list", "a JSON str", "a JSON NoneType"."""
    key, item = parse_line(InputLine(1, data))
    assert key == 1 and isinstance(item, LineError)
    allowed = "an object with a 'prompt' (text) or a 'prompt_token_ids' (a list of token ids)"
    assert str(item) == f"a JSON {kind}; allowed: {allowed}"


def test_every_bad_line_is_reported_before_any_generation(tmp_path: Path) -> None:
    """Before: a seed >= 2**64, a prompt past the context and an oversized max_new_tokens passed the check
    and aborted the run at their line, after the lines before them had been generated."""
    prompts = _write_lines(tmp_path / "prompts.jsonl", HOSTILE)
    out = tmp_path / "out.jsonl"
    r = _run(prompts, out, *DENSE)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert [line.split(" line ")[1].split(":")[0] for line in lines[:-1]] == [str(e[1]) for e in HOSTILE_ERRORS]
    assert all(message in line for (*_, message), line in zip(HOSTILE_ERRORS, lines))
    assert lines[-1] == (
        "decodekit: error: --input prompts.jsonl: 8 bad lines, nothing generated "
        "(--on-error skip writes an error record for each and generates the rest)"
    )
    assert not out.exists() and not (tmp_path / "out.jsonl.settings.json").exists()


def test_on_error_skip_writes_exactly_one_record_per_line(tmp_path: Path) -> None:
    """Before: skipped lines left no record, only a warning; the run aborted at a line past the context."""
    prompts = _write_lines(tmp_path / "prompts.jsonl", HOSTILE)
    clean = _write_lines(tmp_path / "clean.jsonl", [_json(prompt="a"), *[_json(prompt="z")] * 8, _json(prompt="f")])
    out, clean_out = tmp_path / "out.jsonl", tmp_path / "clean_out.jsonl"
    skip, reference = cli_many(
        ["generate", "--input", str(prompts), "--output", str(out), "--on-error", "skip", *DENSE],
        ["generate", "--input", str(clean), "--output", str(clean_out), *DENSE],
        **PLUGINS,
    )
    assert skip.returncode == 0 and reference.returncode == 0, (skip.stderr, reference.stderr)
    records, expected = _records(out), _records(clean_out)
    assert [r["line"] for r in records] == list(range(1, 11))
    assert [_error(r) for r in records if "error" in r] == HOSTILE_ERRORS
    assert [records[0], records[9]] == [expected[0], expected[9]]  # the good lines: as in a clean file
    assert skip.stderr.count("; an error record is written") == 8
    assert skip.stderr.splitlines()[-1] == f"2 results and 8 error records written to {out}"


def test_lines_end_at_newline_only(tmp_path: Path) -> None:
    """Before: a raw U+2028 or U+0085 inside a line split it in two (3 valid lines, 1 result), and a
    byte-order mark made line 1 "not JSON"."""
    lines = [
        b"\xef\xbb\xbf" + _json(prompt="a"),
        '{"prompt": "b", "id": "x\u2028y"}'.encode(),  # raw, not \\u2028
        '{"prompt": "c", "id": "z\u0085w"}'.encode(),
        _json(prompt="d"),
    ]
    out, clean_out = tmp_path / "out.jsonl", tmp_path / "clean.jsonl"
    clean = _write_lines(tmp_path / "clean_in.jsonl", [_json(prompt=p) for p in "abcd"])
    r, reference = cli_many(
        ["generate", "--input", str(_write_lines(tmp_path / "p.jsonl", lines)), "--output", str(out), *ARGS],
        ["generate", "--input", str(clean), "--output", str(clean_out), *ARGS],
    )
    assert r.returncode == 0 and reference.returncode == 0, (r.stderr, reference.stderr)
    records, expected = _records(out), _records(clean_out)
    assert [(rec["id"], rec["line"]) for rec in records] == [(1, 1), ("x\u2028y", 2), ("z\u0085w", 3), (4, 4)]
    assert [rec["tokens"] for rec in records] == [rec["tokens"] for rec in expected]
    assert "\u2028" not in out.read_text(encoding="ascii")  # written escaped: an output line is one line anywhere


def test_invalid_utf8_is_that_lines_error(tmp_path: Path) -> None:
    """Before: one non-UTF-8 byte anywhere failed the whole run, even with --on-error skip."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a"), b'{"prompt": "\xff"}', _json(prompt="c")])
    fail, skip = cli_many(
        ["generate", "--input", str(prompts), "--output", str(tmp_path / "fail.jsonl"), *ARGS],
        ["generate", "--input", str(prompts), "--output", str(tmp_path / "skip.jsonl"), "--on-error", "skip", *ARGS],
    )
    message = "invalid UTF-8: byte 0xff at column 13; allowed: UTF-8 text"
    assert fail.returncode == 2 and f"line 2: {message}" in fail.stderr and "Traceback" not in fail.stderr
    records = _records(tmp_path / "skip.jsonl")
    assert skip.returncode == 0 and [r["line"] for r in records] == [1, 2, 3]
    assert _error(records[1]) == (2, 2, "UnicodeDecodeError", message)


@pytest.mark.parametrize(
    ("data", "kind"),
    [(b"PAR1\x15\x04\x15\x10\n\x00PAR1", "a Parquet file"), (b"\x1f\x8b\x08\x00\n\x00", "gzip-compressed")],
)
def test_an_input_that_is_no_text_is_refused_before_the_model_loads(tmp_path: Path, data: bytes, kind: str) -> None:
    """Before: a Parquet or gzip file was split on its newline bytes into lines of garbage, each reported as
    "not JSON" or "invalid UTF-8" (and with --on-error skip, written as error records)."""
    prompts = tmp_path / "prompts.bin"
    prompts.write_bytes(data)
    out = tmp_path / "o.jsonl"
    r = _run(prompts, out, "-m", "batch-test-unloadable", "--on-error", "skip")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"--input '{prompts}' is {kind}; allowed: a JSONL file" in r.stderr and not out.exists(), r.stderr


def test_resume_reports_an_output_line_that_is_no_record(tmp_path: Path) -> None:
    """Before: a non-UTF-8 line in the output failed --resume with an unexpected UnicodeDecodeError."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a"), _json(prompt="b")])
    out = tmp_path / "out.jsonl"
    assert _run(prompts, out, *ARGS).returncode == 0
    with out.open("ab") as f:
        f.write(b'{"id": 3, "line": 3, "text": "\xff"}\n')
    r = _run(prompts, out, *ARGS, "--resume", "--on-error", "skip")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"--resume: {out} line 3 is not a record of decodekit generate" in r.stderr


# -- the output --------------------------------------------------------------------------------------


def test_output_paths_are_checked_before_the_model_loads(tmp_path: Path) -> None:
    """Before: a directory was told "exists; --resume continues it" and --resume then failed with an
    unexpected IsADirectoryError; a missing folder or an unwritable file was "unexpected …", after loading."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a")])
    folder, written = tmp_path / "results", tmp_path / "written.jsonl"
    folder.mkdir()
    written.write_text('{"line": 1}\n')
    written.chmod(0o444)
    # Root writes through file modes; a sysfs file read-only to everyone (or on a read-only /sys) it cannot.
    unwritable = "/sys/kernel/uevent_seqnum" if os.geteuid() == 0 else str(written)
    unloadable = ["-m", "batch-test-unloadable"]
    cases = {
        "a directory": ([str(folder)], f"--output '{folder}' is a directory"),
        "a directory, resumed": ([str(folder), "--resume"], f"--output '{folder}' is a directory"),
        "a missing folder": ([str(tmp_path / "no" / "r.jsonl")], f"its folder '{tmp_path / 'no'}' does not exist"),
        "unwritable": ([unwritable, "--resume"], f"--output '{unwritable}': cannot write it: "),
    }
    runs = cli_many(
        *(["generate", "--input", str(prompts), "--output", *args, *unloadable] for args, _ in cases.values()),
        **PLUGINS,
    )
    for (name, (_, expected)), r in zip(cases.items(), runs):
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("decodekit: error: ")
        assert expected in r.stderr and "loaded" not in r.stderr, (name, r.stderr)


def test_resume_refuses_another_input_or_other_settings(tmp_path: Path) -> None:
    """Before: --resume with another input skipped every new prompt ("0 results written"), and another
    --seed or --chain silently mixed settings in one output."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a"), _json(prompt="b")])
    other = _write_lines(tmp_path / "q.jsonl", [_json(prompt="a"), _json(prompt="c")])
    out = tmp_path / "out.jsonl"
    assert _run(prompts, out, *ARGS).returncode == 0
    first = out.read_text()
    changed = [a if a != "1.5" else "1.4" for a in ARGS]
    runs = [  # one after another: each takes the output's lock
        cli("generate", "--input", str(path), "--output", str(out), *args, "--resume")
        for path, args in [(other, ARGS), (prompts, [*ARGS[:2], "--seed", "12", *ARGS[4:]]), (prompts, changed)]
    ]
    assert [r.returncode for r in runs] == [2, 2, 2], [r.stderr for r in runs]
    assert "was written with another input (sha256" in runs[0].stderr
    assert "was written with seed=11 (this run: 12)" in runs[1].stderr
    assert "chain='temperature(value=1.5) | sample' (this run: 'temperature(value=1.4) | sample')" in runs[2].stderr
    assert out.read_text() == first
    same = [*ARGS[:6], "--chain", "temperature(value=1.5)", *ARGS[8:]]  # the flags' chain, written out
    r = cli("generate", "--input", str(prompts), "--output", str(out), *same, "--resume")
    assert r.returncode == 0 and "0 results written" in r.stderr and "2 already there" in r.stderr, r.stderr


def test_resume_of_an_output_without_settings_leaves_no_empty_settings_file(tmp_path: Path) -> None:
    """Before: the refusal left behind the empty settings file the lock had created beside the output."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a")])
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "1", "tokens": [1]}\n')  # records another tool (or a lost settings file) left
    r = _run(prompts, out, *ARGS, "--resume")
    assert r.returncode == 2 and "has no readable settings" in r.stderr, r.stderr
    assert not (tmp_path / "out.jsonl.settings.json").exists()
    assert out.read_text() == '{"id": "1", "tokens": [1]}\n'


def test_resume_continues_a_format_1_output_of_a_model_without_stop_tokens(tmp_path: Path) -> None:
    """Format 1 (before `ignore_eos` was recorded) went on past EOS; cli-test-gpt has no stop tokens, so a run
    without --ignore-eos gives the same records: --resume continues it (it was refused before)."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a"), _json(prompt="b"), _json(prompt="c")])
    out = tmp_path / "out.jsonl"
    assert _run(prompts, out, *ARGS).returncode == 0
    expected = out.read_text()
    settings = tmp_path / "out.jsonl.settings.json"
    recorded = json.loads(settings.read_text())
    del recorded["ignore_eos"]
    settings.write_text(json.dumps({**recorded, "format": 1}))
    out.write_text(expected.splitlines(keepends=True)[0])
    r = _run(prompts, out, *ARGS, "--resume")
    assert r.returncode == 0 and "2 results written" in r.stderr and "1 already there" in r.stderr, r.stderr
    assert out.read_text() == expected
    assert json.loads(settings.read_text())["format"] == 4  # recorded again as this run's


def _locked(path: Path) -> bool:
    """Whether another process holds the flock on `path` (the output's settings file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock this call took
    return False


def test_a_second_writer_is_refused(reference: tuple[Path, str], tmp_path: Path) -> None:
    """Before: two processes on one --output both exited 0 and wrote every id twice."""
    prompts, expected = reference
    out = tmp_path / "out.jsonl"
    args = ["generate", "--input", str(prompts), "--output", str(out), *ARGS]
    first = _popen(args, _env())
    deadline = time.monotonic() + 120
    while first.poll() is None and time.monotonic() < deadline and not _locked(tmp_path / "out.jsonl.settings.json"):
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)  # paused with its lock held, before it writes: the others see no output
    try:
        second, resumed = cli_many(args, [*args, "--resume"])
    finally:
        first.send_signal(signal.SIGCONT)
    first.communicate(timeout=120)
    assert first.returncode == 0
    for r in (second, resumed):
        assert r.returncode == 2 and "is being written by another run" in r.stderr, r.stderr
    assert out.read_text() == expected  # every line once


def test_a_line_that_fails_while_decoding_costs_no_other_line(tmp_path: Path) -> None:
    """A failure inside a batch is retried row by row: only the failing line gets an error record, said on stderr as
    a line the check refuses is. Before: under --on-error skip it was written in silence (the summary counted it)."""
    bang = 2  # the test model's id of "!"
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt=p) for p in ("ab", "c!", "de", "fg")])
    args = ["-m", MODEL, "--seed", "11", "--max-new-tokens", "6", "--cache", "none"]
    chain = ["--chain", f"fail_on(token={bang}) | temperature(1.5)"]
    skip_out, fail_out, clean_out = (tmp_path / f"{n}.jsonl" for n in ("skip", "fail", "clean"))
    skip, fail, clean = cli_many(
        ["generate", "--input", str(prompts), "--output", str(skip_out), "--on-error", "skip", *args, *chain],
        ["generate", "--input", str(prompts), "--output", str(fail_out), *args, *chain],
        ["generate", "--input", str(prompts), "--output", str(clean_out), *args, "--chain", "temperature(1.5)"],
        **PLUGINS,
    )
    assert skip.returncode == 0 and clean.returncode == 0, (skip.stderr, clean.stderr)
    records, expected = _records(skip_out), _records(clean_out)
    assert _error(records[1]) == (2, 2, "NumericsError", f"fail_on: a prompt holds token {bang}")
    assert [r["tokens"] for r in records[::2]] == [r["tokens"] for r in expected[::2]] and records[3]["line"] == 4
    assert fail.returncode == 2 and "line 2 (id 2): NumericsError" in fail.stderr
    said = f"decodekit: warning: line 2 (id 2): NumericsError: fail_on: a prompt holds token {bang}; an error record is"
    assert skip.stderr.splitlines() == [f"{said} written", f"3 results and 1 error record written to {skip_out}"]
    assert [r["line"] for r in _records(fail_out)] == [1, 3, 4]  # written; --resume retries line 2


def test_a_job_holds_no_record_it_has_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are written as they come, so a job's memory does not grow with its lines. Before: under --on-error skip
    every record (texts, logprobs) was held to the run's end, to warn of the error records among them."""
    from decodekit_cli.batch_decode import decode_records

    class Held(dict[str, Any]):  # a record a weak reference can follow
        pass

    made: list[weakref.ref[Held]] = []
    alive: list[int] = []  # records still held when the next one comes

    def watched(*args: Any, **kwargs: Any) -> Iterator[Held]:
        for record in decode_records(*args, **kwargs):
            alive.append(sum(ref() is not None for ref in made))
            held = Held(record)
            made.append(weakref.ref(held))
            yield held

    monkeypatch.setattr("decodekit_cli.batch_job.decode_records", watched)
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt=p) for p in "abcdefgh"])
    out = tmp_path / "o.jsonl"
    args = ["generate", "--input", str(prompts), "--output", str(out), "--on-error", "skip", *ARGS]
    r = run_cli(args, _env(**PLUGINS))
    assert r.returncode == 0, r.stderr
    assert len(_records(out)) == len(made) == 8
    assert max(alive) <= 1, alive  # the loop's last record, at most


def test_input_from_stdin(tmp_path: Path) -> None:
    """Before: `--input -` was taken for a file named '-' ("cannot read it: No such file or directory")."""
    text = (_json(prompt="ROMEO: ", id="a") + b"\n" + _json(prompt="JULIET: ") + b"\n").decode()
    prompts, from_file, out = tmp_path / "p.jsonl", tmp_path / "f.jsonl", tmp_path / "o.jsonl"
    prompts.write_text(text)
    assert _run(prompts, from_file, *ARGS).returncode == 0
    args, env = ["generate", "--input", "-", "--output", str(out), *ARGS], _env(**PLUGINS)
    r = run_cli(args, env, stdin=text)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == from_file.read_text() and len(_records(out)) == 2
    resumed = run_cli([*args, "--resume"], env, stdin=text)  # the same lines piped again: the same input
    assert resumed.returncode == 0 and f"0 results written to {out}, 2 already there" in resumed.stderr
    other = run_cli([*args, "--resume"], env, stdin=text + '{"prompt": "x"}\n')
    assert other.returncode == 2 and "was written with another input (sha256" in other.stderr
    ray = run_cli([*args, "--ray"], env, stdin=text)
    assert ray.returncode == 2 and len(ray.stderr.splitlines()) == 1, ray.stderr
    assert "--input '-' (stdin) cannot be combined with --ray: every Ray worker reads the input file" in ray.stderr


def test_input_dot_slash_dash_is_the_file_named_dash(tmp_path: Path) -> None:
    """Before: `--input ./-` read stdin (the path normalises to "-"), not the file the shell convention names."""
    text = (_json(prompt="ROMEO: ", id="a") + b"\n").decode()
    (tmp_path / "-").write_text(text)
    from_file, out = tmp_path / "f.jsonl", tmp_path / "o.jsonl"
    assert _run(_write_lines(tmp_path / "p.jsonl", [text.encode().strip()]), from_file, *ARGS).returncode == 0
    r = run_cli(["generate", "--input", "./-", "--output", str(out), *ARGS], _env(**PLUGINS), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == from_file.read_text()


def test_a_lines_chain_takes_a_json_spec_as_chain_does(tmp_path: Path) -> None:
    """Before: a line's chain took a chain string only: a JSON list was "Input should be a valid string"
    and a string holding JSON was read as a chain string ("expected a sampler name")."""
    spec = [{"name": "top_k", "params": {"k": 5}}, {"name": "sample"}]
    chains: list[object] = [spec, json.dumps(spec), "top_k(5) | sample", '[{"name": ', {"name": "top_k"}, 5]
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="ROMEO: ", seed=3, chain=c) for c in chains])
    out = tmp_path / "o.jsonl"
    r = _run(prompts, out, *ARGS, "--on-error", "skip")
    assert r.returncode == 0, r.stderr
    records = _records(out)
    assert [rec["chain"] for rec in records[:3]] == ["top_k(k=5) | sample"] * 2 + ["top_k(5) | sample"]
    assert records[0]["tokens"] == records[1]["tokens"] == records[2]["tokens"]
    assert [_error(rec) for rec in records[3:]] == [
        (
            4,
            4,
            "ChainSpecError",
            "chain '[{\"name\": ': chain spec: not valid JSON: Expecting value: line 1 column 11 (char 10)",
        ),
        (
            5,
            5,
            "ChainSpecError",
            "chain '{\"name\": \"top_k\"}': chain spec: {'name': 'top_k'}; allowed: a list of stage objects",
        ),
        (  # was "allowed: None, or str | list[Any] | dict[str, Any]"
            6,
            6,
            "ParameterError",
            "prompt line: chain=5 is invalid; allowed: a chain string, or a JSON chain spec (a list of stage objects, "
            "or its JSON text)",
        ),
    ]


def test_a_lines_field_of_a_wrong_type_says_what_to_write() -> None:
    """The line check (the CLI's and the Ray job's) said "allowed: None, or str | list[Any] | dict[str, Any]"."""
    from decodekit_cli.batch_input import InputLine, parse_line

    messages = [
        str(parse_line(InputLine(1, _json(prompt="x", **{k: v})))[1]) for k, v in (("chain", 5), ("json_schema", 1))
    ]
    assert messages == [
        "prompt line: chain=5 is invalid; allowed: a chain string, or a JSON chain spec (a list of stage objects, "
        "or its JSON text)",
        "prompt line: json_schema=1 is invalid; allowed: a JSON Schema (an object or true, or its JSON text)",
    ]


class _Stdin:
    """A stand-in for `sys.stdin` with its bytes and whether it is a terminal."""

    def __init__(self, data: bytes, tty: bool) -> None:
        self.buffer, self._tty = io.BytesIO(data), tty

    def isatty(self) -> bool:
        return self._tty


def test_input_from_a_terminal_says_how_to_end_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--input -` on a terminal waited silently: it prints a one-line hint on stderr, then reads; piped, nothing."""
    from decodekit_cli.batch_input import read_input

    for tty, hint in [
        (
            True,
            "reading prompt lines from standard input (one JSON object per line, such as "
            '{"prompt": "ROMEO:"}); end with Ctrl-D\n',
        ),
        (False, ""),
    ]:
        monkeypatch.setattr("sys.stdin", _Stdin(b'{"prompt": "a"}\n', tty))
        assert read_input(Path("-")) == b'{"prompt": "a"}\n'
        assert capsys.readouterr() == ("", hint)


def test_batch_options_are_checked_before_loading(tmp_path: Path) -> None:
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a")])
    unloadable = "batch-test-unloadable"
    batch = ["generate", "--input", str(prompts), "--output", str(tmp_path / "o.jsonl"), "-m", unloadable]
    cases = {
        "no output": (["generate", "--input", "p.jsonl", "-m", MODEL], "--output is missing"),
        "with a prompt": (["generate", "ROMEO", "--input", "p", "--output", "o", "-m", MODEL], "with PROMPT"),
        "with --json": (["generate", "--input", "p", "--output", "o", "--json", "-m", MODEL], "with --json"),
        # was accepted and did nothing: a record is never echoed
        "with --no-echo": (["generate", "--input", "p", "--output", "o", "--no-echo", "-m", MODEL], "with --no-echo"),
        "no file": (["generate", "--input", "/nonexistent.jsonl", "--output", "o", "-m", MODEL], "cannot read it"),
        "--ray alone": (["generate", "--ray", "-m", MODEL], "--ray: a batch job's option; allowed: with --input FILE"),
        "an actor size": ([*batch, "--ray-actors", "2"], "--ray-actors size the actors of --ray"),
        "--resume alone": (["generate", "a", "--resume", "-m", unloadable], "--resume: a batch job's option; allowed:"),
        "batch options alone": (
            ["generate", "a", "--batch-size", "3", "--on-error", "skip", "-m", unloadable],
            "--batch-size, --on-error: a batch job's option; allowed: with --input FILE --output FILE",
        ),
        "an actor size alone": (["generate", "a", "--ray-actor-cpus", "2", "-m", unloadable], "--ray-actor-cpus size"),
        # was accepted and did nothing: the document holds the prompt and the text apart
        "--no-echo with --json": (["generate", "a", "--json", "--no-echo", "-m", unloadable], "--no-echo does nothing"),
    }
    for (name, (_, expected)), r in zip(cases.items(), cli_many(*(args for args, _ in cases.values()), **PLUGINS)):
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, (name, r.stderr)
        assert expected in r.stderr, (name, r.stderr)


def test_ray_without_decodekit_ray_names_the_distribution(tmp_path: Path) -> None:
    """In a process whose `decodekit_ray` cannot be imported, as where it is not installed."""
    (tmp_path / "decodekit_ray.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'decodekit_ray'\", name='decodekit_ray')\n"
    )
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a")])
    args = ["generate", "--input", str(prompts), "--output", str(tmp_path / "o.jsonl"), "--ray"]
    p = _popen([*args, "-m", "batch-test-unloadable"], _env(**PLUGINS, PYTHONPATH=f"{tmp_path}{os.pathsep}{TESTS}"))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "loaded" not in err, err
    assert err.splitlines()[-1] == (
        "decodekit: error: --ray needs decodekit-ray; install: pip install decodekit-ray "
        f"(from a checkout: pip install {TESTS.parent}/plugins/decodekit-ray)"
    )


def test_a_strategy_decodes_every_line(tmp_path: Path) -> None:
    """`--input` batch mode refused `--strategy`; greedy speculative lines equal greedy sampled ones."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Line {i}: abc"}) + "\n" for i in range(6)))
    args = ["-m", MODEL, "--max-new-tokens", "8", "--chain", "greedy", "--batch-size", "4"]
    plain, spec = tmp_path / "plain.jsonl", tmp_path / "spec.jsonl"
    runs = cli_many(
        ["generate", "--input", str(prompts), "--output", str(plain), *args],
        ["generate", "--input", str(prompts), "--output", str(spec), "--strategy", "speculative(draft=ngram)", *args],
    )
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    tokens = [[json.loads(line)["tokens"] for line in path.read_text().splitlines()] for path in (plain, spec)]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 6


def test_a_window_cache_result_depends_on_neither_batch_size_nor_neighbours(tmp_path: Path) -> None:
    """Before: with `--cache window(...)` a left-padded row's sinks were padding, so a line's tokens changed with
    `--batch-size` and its neighbours once the window evicted; a job then decoded only prompts of one length together
    (`exact_when_padded`). Now lines of mixed prompt lengths share a batch, each decoded as alone (`--batch-size 1`)."""
    prompts = tmp_path / "prompts.jsonl"
    lines = ["Line: " + "abcdefghijklmnop"[:i] for i in (0, 16, 2, 9, 5, 14)]  # 6 to 22 characters
    prompts.write_text("".join(json.dumps({"prompt": line}) + "\n" for line in lines))
    args = [
        "-m",
        "tiny-shakespeare",
        "--seed",
        "3",
        "--max-new-tokens",
        "40",
        "--cache",
        "window(size=8, sinks=2, slack=4)",
    ]
    outputs = [tmp_path / f"batch{size}.jsonl" for size in (1, 3, 6)]
    runs = cli_many(
        *[
            ["generate", "--input", str(prompts), "--output", str(out), "--batch-size", str(size), *args]
            for out, size in zip(outputs, (1, 3, 6))
        ]
    )
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    alone = _records(outputs[0])
    assert len(alone) == 6 and all(len(r["tokens"]) == 40 for r in alone)
    assert _records(outputs[1]) == alone
    assert _records(outputs[2]) == alone


def test_resume_reports_only_the_bad_lines_it_still_has_to_do(tmp_path: Path) -> None:
    """Before: `--resume` warned "an error record is written" again for bad lines whose error record the output
    already held (none was written), and with --on-error fail refused to resume an output that had them."""
    prompts = _write_lines(tmp_path / "prompts.jsonl", [_json(prompt="a"), SEED_TOO_BIG, _json(prompt="c")])
    out = tmp_path / "out.jsonl"
    first = _run(prompts, out, "--on-error", "skip", *DENSE)
    assert first.returncode == 0 and first.stderr.count("an error record is written") == 1, first.stderr
    written = out.read_text()
    for on_error in ("skip", "fail"):
        again = _run(prompts, out, "--resume", "--on-error", on_error, *DENSE)
        assert (again.returncode, again.stderr.splitlines()) == (0, [f"0 results written to {out}, 3 already there"])
        assert out.read_text() == written


def _two_folders_with_weights(tmp_path: Path) -> list[str]:
    """Folders a and b, each with tiny-shakespeare's weights as w.safetensors; a job's arguments (2 prompts)."""
    import shutil

    import decodekit_shakespeare

    weights = Path(decodekit_shakespeare.__file__).parent / "tiny_shakespeare.safetensors"
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(weights, tmp_path / folder / "w.safetensors")
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a"), _json(prompt="b")])
    out = tmp_path / "out.jsonl"
    return ["generate", "--input", str(prompts), "--output", str(out), "--max-new-tokens", "3", "--seed", "1"]


def test_resume_in_another_directory_refuses_a_relative_model_path_naming_other_files(tmp_path: Path) -> None:
    """`--model tiny-shakespeare:w.safetensors` resumed in another directory loaded that directory's file, and the
    output held two models' results; the record now names the file absolutely (so do Ray actors, elsewhere)."""
    args = _two_folders_with_weights(tmp_path)
    model = ["--model", "tiny-shakespeare:w.safetensors"]
    assert run_cli([*args, *model], cwd=tmp_path / "a").returncode == 0
    recorded = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["model"]
    assert recorded == f"tiny-shakespeare:{(tmp_path / 'a' / 'w.safetensors').resolve()}"
    elsewhere = run_cli([*args, *model, "--resume"], cwd=tmp_path / "b")
    assert elsewhere.returncode == 2 and "was written with model=" in elsewhere.stderr, elsewhere.stderr
    same = run_cli([*args, "--model", f"tiny-shakespeare:{recorded.split(':', 1)[1]}", "--resume"], cwd=tmp_path)
    assert same.returncode == 0 and "2 already there" in same.stderr, same.stderr


def test_resume_in_another_directory_refuses_a_relative_draft_path_naming_other_files(tmp_path: Path) -> None:
    """`--strategy 'speculative(draft=tiny-shakespeare:w.safetensors)'` was recorded as typed: resumed in another
    directory it loaded that directory's draft, and fixed-seed records differed from an uninterrupted run's."""
    args = _two_folders_with_weights(tmp_path)
    strategy = ["--strategy", "speculative(draft=tiny-shakespeare:w.safetensors, k=2)"]
    assert run_cli([*args, *strategy], cwd=tmp_path / "a").returncode == 0
    recorded = json.loads((tmp_path / "out.jsonl.settings.json").read_text())["strategy"]
    draft = f"tiny-shakespeare:{(tmp_path / 'a' / 'w.safetensors').resolve()}"
    assert recorded == f"speculative(draft={draft!r}, k=2)"
    elsewhere = run_cli([*args, *strategy, "--resume"], cwd=tmp_path / "b")
    assert elsewhere.returncode == 2 and "was written with strategy=" in elsewhere.stderr, elsewhere.stderr
    same = run_cli([*args, "--strategy", f"speculative(draft={draft!r}, k=2)", "--resume"], cwd=tmp_path)
    assert same.returncode == 0 and "2 already there" in same.stderr, same.stderr


def test_lines_that_differ_only_in_max_new_tokens_or_stop_share_a_decode() -> None:
    """Before: `batches` split runs by length too, so a job of mixed max_new_tokens (or a checkpoint's max_length,
    one length per prompt length) decoded nearly one line per decode; then by a line's own stop strings (an
    evaluation's `until`, which differs per task) until `dk.generate` took them per prompt."""
    from decodekit_cli.batch_decode import Pending, batches

    stops: list[tuple[str, ...]] = [(), ("\n",), ("\n", "."), ()]
    lines = [
        Pending(i, i, "p", [1, 2], i, n, "greedy", stop=stop) for i, n, stop in zip(range(1, 5), [3, 7, 0, 5], stops)
    ]
    other = Pending(5, 5, "p", [1, 2], 5, 3, "top_k(5) | sample")
    assert [[p.line for p in b] for b in batches([*lines, other], 8)] == [[1, 2, 3, 4], [5]]


def test_lines_that_alternate_chains_fill_their_batches_and_wait_a_bounded_while() -> None:
    """Before: only consecutive lines of the same options shared a decode, so a job whose lines alternate two chains
    (a data set mixing two tasks, or vLLM's per-request sampling settings as chains) decoded one line per decode."""
    from decodekit_cli.batch_decode import LOOKAHEAD_BATCHES, Pending, batches

    chains = ["greedy", "top_k(5) | sample"]
    lines = [Pending(i, i, "p", [1, 2], i, 4, chains[i % 2]) for i in range(20)]
    assert [[p.line for p in b] for b in batches(lines, 4)] == [
        [0, 2, 4, 6],
        [1, 3, 5, 7],
        [8, 10, 12, 14],
        [9, 11, 13, 15],
        [16, 18],
        [17, 19],
    ]
    # A lone line of another chain is given once the lines after it reach LOOKAHEAD_BATCHES batches, not at the end:
    # the records of the lines after it are held until its own is written.
    size, many = 4, 4 * 4 * LOOKAHEAD_BATCHES
    others = [Pending(i, i, "p", [1], i, 4, chains[1]) for i in range(1, many)]
    lone = [Pending(0, 0, "p", [1], 0, 4, "greedy"), *others]
    given = [[p.line for p in b] for b in batches(lone, size)]
    before = next(n for n, b in enumerate(given) if b == [0])
    assert sum(map(len, given[:before])) <= size * LOOKAHEAD_BATCHES
    assert sorted(line for b in given for line in b) == list(range(many))


def test_lines_that_alternate_chains_write_the_records_of_each_line_alone(tmp_path: Path) -> None:
    """Lines of two chains decoded in batches of their own chain are written in input order, each record as with
    `--batch-size 1`."""
    prompts = tmp_path / "prompts.jsonl"
    chains = ["greedy", "top_k(5) | sample"]
    prompts.write_text(
        "".join(json.dumps({"prompt": "Line: " + "abcd"[: i % 5], "chain": chains[i % 2]}) + "\n" for i in range(10))
    )
    args = ["-m", MODEL, "--seed", "3", "--max-new-tokens", "6", "--ignore-eos"]
    alone, together = tmp_path / "alone.jsonl", tmp_path / "together.jsonl"
    runs = cli_many(
        ["generate", "--input", str(prompts), "--output", str(alone), "--batch-size", "1", *args],
        ["generate", "--input", str(prompts), "--output", str(together), "--batch-size", "4", *args],
    )
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert [r["line"] for r in _records(together)] == list(range(1, 11))
    assert _records(together) == _records(alone)


@pytest.mark.parametrize("strategy", ["sample", "beam(num_beams=2)", "speculative(draft=ngram)"])
def test_mixed_lengths_in_one_batch_equal_each_line_alone(tmp_path: Path, strategy: str) -> None:
    """Each line's limit reaches its own row (beam, which takes one, decodes each length apart): the records of a
    batch of mixed max_new_tokens equal those of `--batch-size 1`."""
    prompts = tmp_path / "prompts.jsonl"
    lengths = [3, 7, 0, 5, 7, 2]
    prompts.write_text(
        "".join(
            json.dumps({"prompt": "Line: " + "abcdefgh"[:i], "max_new_tokens": n}) + "\n" for i, n in enumerate(lengths)
        )
    )
    args = ["-m", MODEL, "--seed", "3", "--temperature", "1.5", "--ignore-eos", "--strategy", strategy]
    alone, together = tmp_path / "alone.jsonl", tmp_path / "together.jsonl"
    runs = cli_many(
        ["generate", "--input", str(prompts), "--output", str(alone), "--batch-size", "1", *args],
        ["generate", "--input", str(prompts), "--output", str(together), "--batch-size", "6", *args],
    )
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert _records(together) == _records(alone)
    assert [len(r["tokens"]) for r in _records(alone)] == lengths


def test_lines_that_fit_the_context_alone_and_not_together_decode_apart() -> None:
    """A long prompt with a short limit beside a short prompt with a long one (a checkpoint's max_length): each fits
    the context alone, and so together (the context is checked per prompt); each record is as alone."""
    from decodekit_cli.batch_decode import Pending, decode_records
    from decodekit_cli.batch_settings import BatchSettings

    import decodekit as dk
    from tinymodels import tiny_gpt

    model = tiny_gpt()
    context = model.spec.max_positions
    rows = [
        Pending(1, 1, "long", [1] * (context - 4), 1, 4, "greedy"),
        Pending(2, 2, "short", [2], 2, context - 1, "greedy"),
    ]
    assert dk.validate(model, [p.ids for p in rows], max_new_tokens=[4, context - 1]).limits == (4, context - 1)
    settings = BatchSettings(model="tiny", chain="greedy", max_new_tokens=4, seed=None, cache="dense")
    together = {r["line"]: r for r in decode_records(model, settings, rows)}
    for p in rows:
        [alone] = decode_records(model, settings, [p])
        assert (
            together[p.line] == alone
            and alone["finish_reason"] == "length"
            and len(alone["tokens"]) == p.max_new_tokens
        )


def test_replace_unknown_with_a_tokenizer_without_errors_is_one_error_not_one_per_line(tmp_path: Path) -> None:
    """cli-test-gpt's tokenizer takes no errors= option: --replace-unknown is refused once, before any line is
    checked, not as an error record (or a bad line) for every line of the job."""
    prompts = _write_lines(tmp_path / "p.jsonl", [_json(prompt="a"), _json(prompt="b"), _json(prompt="c")])
    out = tmp_path / "o.jsonl"
    for on_error in ("fail", "skip"):
        r = _run(prompts, out, *ARGS, "--replace-unknown", "--on-error", on_error)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
        assert "--replace-unknown: the model's tokenizer has no errors= option" in r.stderr
        assert "line" not in r.stderr and (not out.exists() or out.read_text() == "")


def test_a_lines_own_stop_strings_replace_stop_for_that_line(tmp_path: Path) -> None:
    """vLLM's per-request `stop`, lm-eval's `until`: a line's `stop` (a string or a list) ends its text where the
    first of them appears, as --stop ends the others; the text is the unstopped one cut before it."""
    args = ["-m", MODEL, "--max-new-tokens", "24", "--temperature", "1.5", "--cache", "dense"]
    free = _write_lines(tmp_path / "free.jsonl", [_json(prompt="ROMEO: ", seed=s) for s in (1, 2, 3)])
    assert _run(free, tmp_path / "free.out", *args).returncode == 0
    texts = [rec["text"] for rec in _records(tmp_path / "free.out")]
    own, job = texts[0][5:7], texts[1][8:10]
    lines = [
        _json(prompt="ROMEO: ", seed=1, stop=[own, "never in it"]),
        _json(prompt="ROMEO: ", seed=2),
        _json(prompt="ROMEO: ", seed=3, stop="never in it"),
        *(_json(prompt="ROMEO: ", seed=1, stop=bad) for bad in ("", [""], 3, ["a", 3])),
    ]
    out = tmp_path / "o.jsonl"
    r = _run(_write_lines(tmp_path / "p.jsonl", lines), out, *args, "--stop", job, "--on-error", "skip")
    assert r.returncode == 0, r.stderr
    records = _records(out)
    assert [(rec["text"], rec["finish_reason"], rec["stopped_by"]) for rec in records[:3]] == [
        (texts[0][: texts[0].index(own)], "stop", own),
        (texts[1][: texts[1].index(job)], "stop", job),
        (texts[2], "length", None),
    ]
    allowed = "allowed: a non-empty string or a list of them, or null (--stop's)"
    empty = "an empty stop string would end every sample at once; allowed: non-empty strings"
    assert [_error(rec)[3] for rec in records[3:]] == [
        f'prompt line: stop="" is invalid: {empty}',
        f'prompt line: stop=[""] is invalid: {empty}',
        f"prompt line: stop=3 is invalid; {allowed}",
        f"prompt line: stop=['a', 3] is invalid; {allowed}",
    ]


def test_a_line_whose_prompt_the_tokenizer_cannot_encode_names_the_prompt_field(tmp_path: Path) -> None:
    """The tokenizer's words name a position in the text; a line's error record names the field it is in."""
    prompts = _write_lines(tmp_path / "in.jsonl", [_json(prompt="JULIET: \u00e9"), _json(prompt="ROMEO:")])
    out = tmp_path / "out.jsonl"
    r = _run(prompts, out, "-m", "tiny-shakespeare", "--max-new-tokens", "2", "--on-error", "skip")
    assert r.returncode == 0, r.stderr
    error = _records(out)[0]["error"]
    assert error["type"] == "UnknownCharacterError"
    assert error["message"].startswith("prompt: CharTokenizer.encode: 1 character(s) not in the alphabet: '\u00e9'")
    assert "line 1: prompt: CharTokenizer.encode" in r.stderr


def test_a_lines_sampler_field_is_told_to_go_in_its_chain(tmp_path: Path) -> None:
    """vLLM's per-request `temperature` and `top_p` are samplers here: the error record of a line naming them as
    fields says where they go, the line's chain, written out, and which of the job's stages that chain would drop (vLLM
    keeps a model's other defaults; before, the hint did not say a line's chain replaces the job's); an unknown field
    that is no sampler says nothing more. Before that: only the list of allowed fields."""
    lines = [_json(prompt="a", temperature=0.7, top_p=0.9), _json(prompt="b", max_tokens=5), _json(prompt="c", top_k=3)]
    prompts, out = _write_lines(tmp_path / "p.jsonl", lines), tmp_path / "out.jsonl"
    assert _run(prompts, out, *ARGS, "--top-k", "20", "--on-error", "skip").returncode == 0
    first, second, third = (r["error"]["message"] for r in _records(out))
    assert first.startswith("prompt line: unknown parameter temperature=0.7; allowed parameters: prompt, ")
    job = '"temperature(value=1.5) | top_k(k=20)"'
    assert first.endswith(
        '; a sampler is a stage of the line\'s chain: "chain": "temperature(0.7) | top_p(0.9)" '
        f"(it replaces the job's chain, {job}: give its top_k too)"
    )
    assert second.endswith("did you mean 'max_new_tokens'?")
    assert third.endswith(f'"chain": "top_k(3)" (it replaces the job\'s chain, {job}: give its temperature too)')


def test_another_librarys_request_field_says_what_gives_it(tmp_path: Path) -> None:
    """An OpenAI batch line's `messages`, vLLM's `stop_token_ids` ("did you mean 'prompt_token_ids'?") and `min_tokens`
    ("'max_new_tokens'?") and transformers' `do_sample` were refused with the allowed fields alone, or a misleading
    one."""
    messages = [{"role": "user", "content": "hi"}]
    lines = [_json(messages=messages), _json(prompt="a", stop_token_ids=[1]), _json(prompt="a", do_sample=False),
             _json(prompt="a", min_tokens=2)]  # fmt: skip
    prompts, out = _write_lines(tmp_path / "p.jsonl", lines), tmp_path / "out.jsonl"
    assert _run(prompts, out, *ARGS, "--on-error", "skip").returncode == 0
    said = [r["error"]["message"] for r in _records(out)]
    assert all(m.startswith(f"prompt line: unknown parameter {f}; allowed parameters: prompt, ") for m, f in
               zip(said, ["messages", "stop_token_ids", "do_sample", "min_tokens"]))  # fmt: skip
    assert said[0].endswith("; a chat goes through the model's chat template first: give the ids it returns as "
                            "prompt_token_ids")  # fmt: skip
    assert said[1].endswith("; a line stops at the model's end-of-text ids (none under --ignore-eos) and its "
                            '"stop" strings')  # fmt: skip
    assert said[2].endswith('; do_sample false is the line\'s "chain": "greedy"')
    assert said[3].endswith('stage of the line\'s chain: "chain": "min_new_tokens(n, [eos ids])"')


def test_a_llama_server_field_says_what_gives_it(tmp_path: Path) -> None:
    """llama-server's /completion fields: `mirostat: 2` was told "chain": "mirostat(2)" (the mode read as mirostat's
    tau), `logit_bias` as llama.cpp's pairs a chain the sampler then refused, `cache_prompt` "did you mean 'prompt'?",
    and `n_predict`, `n_probs` and `repeat_penalty` nothing but the allowed fields; `seed: -1` (llama-server's fresh
    seed) only its range."""
    fields: list[dict[str, Any]] = [
        {"mirostat": 2},
        {"logit_bias": [[5, 1.0]]},
        {"cache_prompt": True},
        {"n_predict": 4},
        {"n_probs": 3},
        {"repeat_penalty": 1.1},
        {"logit_bias": {"5": 1.0}},
        {"seed": -1},
    ]
    lines = [_json(prompt="a", **field) for field in fields]
    prompts, out = _write_lines(tmp_path / "p.jsonl", lines), tmp_path / "out.jsonl"
    assert _run(prompts, out, *ARGS, "--on-error", "skip").returncode == 0
    said = [r["error"]["message"] for r in _records(out)]
    assert said[0].endswith('; llama.cpp\'s mirostat 1 is "chain": "temperature(t) | mirostat(tau, eta)", 2 '
                            '"temperature(t) | mirostat_v2(tau, eta)"')  # fmt: skip
    assert said[1].endswith('; a sampler is a stage of the line\'s chain: "chain": "logit_bias(...)", where '
                            "logit_bias: bias=[[5, 1.0]] is invalid: Input should be an object; allowed: an object "
                            "mapping integers in [0, 2**63) to numbers in [-100, 100]")  # fmt: skip
    assert said[2].endswith("; a job prefills a prefix its lines share once, unasked")
    assert said[3].endswith('; llama.cpp\'s n_predict is "max_new_tokens"')
    assert said[4].endswith('; llama.cpp\'s n_probs is "logprobs": the record\'s "top"; its post_sampling_probs, '
                            '"processed_top"')  # fmt: skip
    assert said[5].endswith('; llama.cpp\'s repeat_penalty is the line\'s "chain": "repetition_penalty(r, 64)"')
    assert said[6].endswith(
        '; a sampler is a stage of the line\'s chain: "chain": "logit_bias({\\"5\\": 1.0})" '
        '(it replaces the job\'s chain, "temperature(value=1.5)": give its temperature too)'
    )
    assert said[7] == (
        "prompt line: seed=-1 is invalid; allowed: an integer 0 <= seed < 2**64, or null (from --seed); llama.cpp's -1 "
        "(a fresh seed) is leaving out the line's seed and --seed"
    )

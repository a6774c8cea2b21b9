"""Fuzz of the command line: `decodekit generate`, `explain` and `samplers` with hypothesis-drawn argv (hostile
numbers, names, chain strings, paths that are directories or missing, `--input` JSONL lines with hostile fields).

Whatever the argv, the command ends with a status docs/cli.md documents (0, 1 or 2), never a traceback, and with
`--json` (or `--output`) what it wrote is well-formed JSON. The commands run in this process (`cli_runner.run_cli`,
as tests/test_cli.py runs them) on `cli-test-gpt`, each under a time limit. The cases are the same on every run
(`derandomize`); DECODEKIT_CLI_FUZZ_EXAMPLES=2000 runs more (the suite runs 40, under a minute).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import MODEL, _env

EXAMPLES = int(os.environ.get("DECODEKIT_CLI_FUZZ_EXAMPLES", "40"))
STATUSES = {0, 1, 2}  # docs/cli.md, "Errors and exit status" (130 and 141 need a signal; none is sent here)
TIME_LIMIT = 60  # seconds one command may take: a hang is a finding

HUGE = ["18446744073709551616", "9223372036854775808", "100000000000000000000000000000"]
INTS = ["-1", "0", "1", "2", "3", "-0", "+2", " 2", "2.0", "1e3", "0x10", "nan", "inf", "", "abc", "\u0663", *HUGE]
FLOATS = ["nan", "inf", "-inf", "-1", "0", "-0.0", "0.5", "1", "1.5", "1e308", "1e309", "5e-324", "", "x", "1e-320"]
SAMPLERS = [
    "top_k",
    "top_p",
    "temperature",
    "top_h",
    "mirostat",
    "mirostat_v2",
    "min_p",
    "typical",
    "xtc",
    "repetition_penalty",
    "dry",
    "logit_bias",
    "bad_words",
    "top_n_sigma",
    "greedy",
    "sample",
    "nope",
    "",
]
VALUES = ["", "1", "0", "-1", "0.5", "nan", "inf", "1e309", "2**64", "k=3", "h=0.5", "tau=nan", "x=1", "'a'", "[1]",
          "{1: 2}", "{[1]: 2}", "(", "None", "True", "18446744073709551616"]  # fmt: skip
CHAINS = ["top_k(5) | sample", "greedy", "top_h(0.5) | sample", "mirostat", "temperature(0.7) | mirostat(tau=3)", "|",
          "top_k(", "sample | top_k(3)", "[", "{}", "[]", '[{"name": "top_k", "params": {"k": -1}}]', '"greedy"',
          '[{"name": "top_p", "params": {"p": NaN}}]', "top_k(5) |", "top_k(5) | | greedy", "-" * 3000]  # fmt: skip
STRATEGIES = ["sample", "beam(num_beams=2)", "beam(num_beams=0)", "beam(num_beams=2, num_return_sequences=3)",
              "cfg", "cfg(scale=nan)", "cfg(scale=1e308)", "cfg(negative='')", "cfg(negative=[])", "cfg(negative=[-1])",
              "cfg(negative=[[1], [2]])", "speculative", "speculative(k=0)", "speculative(draft='nope')",
              "speculative(draft=ngram, k=64, ngram_size=64)", "speculative(draft='cli-test-gpt')", "nope", "", "beam(",
              "sample(x=1)"]  # fmt: skip
CACHES = ["dense", "gqa", "int8", "none", "window(size=4)", "window(size=0)", "h2o(budget=2)", "nope", "", "dense("]
MODELS = [MODEL] * 8 + ["", "nope", f"{MODEL}(n_layer=-1)", f"{MODEL}(", "hf:", "hf:/nonexistent", "hf:<dir>"]
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


@dataclass(frozen=True)
class Case:
    """argv with `<dir>` (a directory), `<missing>` (a path to nothing) and `<file:N>` (`files[N]`'s path) made
    real in a fresh directory; stdin; whether the command prints JSON or writes an `--output` file to check."""

    argv: tuple[str, ...]
    files: tuple[bytes, ...] = ()
    stdin: str = ""
    json: bool = False
    output: bool = False
    notes: tuple[str, ...] = field(default=(), compare=False)


def _pick(draw: st.DrawFn, values: Sequence[str], other: st.SearchStrategy[str] = TEXT) -> str:
    """A listed value most of the time, else any text."""
    return draw(st.one_of(st.sampled_from(values), other) if draw(st.integers(0, 9)) == 0 else st.sampled_from(values))


def _chain(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return _pick(draw, CHAINS)
    stages = draw(st.lists(st.tuples(st.sampled_from(SAMPLERS), st.sampled_from(VALUES)), min_size=1, max_size=3))
    return " | ".join(f"{name}({value})" if value or draw(st.booleans()) else name for name, value in stages)


def _flag(draw: st.DrawFn, name: str, values: Sequence[str]) -> list[str]:
    return [name, _pick(draw, values)] if draw(st.integers(0, 2)) == 0 else []


def _steps(draw: st.DrawFn, name: str, cache: list[str]) -> list[str]:
    """A small count, or a hostile one; never a huge one under `--cache none`, which crops the context and would
    (rightly) generate that many tokens."""
    value = draw(st.sampled_from(["0", "1", "2", "3"]) if draw(st.integers(0, 2)) else st.sampled_from(INTS))
    if value.strip().lstrip("+").isdigit() and int(value) > 8 and cache[-1:] == ["none"]:
        value = "3"
    return [name, value]


def _sampling(draw: st.DrawFn) -> list[str]:
    args = ["--chain", _chain(draw)] if draw(st.integers(0, 2)) == 0 else []
    for name, values in (
        ("--temperature", FLOATS),
        ("--top-k", INTS),
        ("--top-p", FLOATS),
        ("--repetition-penalty", FLOATS),
    ):
        args += _flag(draw, name, values)
    return args


def _common(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Model, seed, cache and sampling flags (shared by generate and explain), and the cache flag alone."""
    model = _pick(draw, MODELS)
    cache = _flag(draw, "--cache", CACHES)
    args = ["-m", model] if model or draw(st.booleans()) else []
    args += _flag(draw, "--seed", INTS) + cache + _sampling(draw)
    args += ["--replace-unknown"] * draw(st.booleans()) + ["--ignore-eos"] * draw(st.booleans())
    return args, cache


def _prompt(draw: st.DrawFn) -> tuple[str, str]:
    """The prompt argument and stdin ('-' reads it)."""
    prompt = draw(st.one_of(st.sampled_from(["ROMEO: ", "a", "", "-", "--", "\u2665", "\n"]), TEXT))
    return prompt, (draw(TEXT) if prompt == "-" else "")


_LINE_FIELDS: dict[str, list[Any]] = {
    "prompt": ["ROMEO", "", 5, None, ["a"], "\u2665", "a" * 200],
    "id": ["x", 1, -1, 1.5, None, [], {}, True, "x"],
    "seed": [0, -1, 2**64, 1.5, "3", None, True, math.nan],
    "max_new_tokens": [0, 1, 3, -1, 2**64, 1.5, "3", None, 10**6],
    "chain": ["greedy", "top_k(", [], {}, [{"name": "top_h", "params": {"h": 2}}], 5, "mirostat(tau=-1)"],
    "logprobs": [0, 2, -1, 96, 97, 2**63, 1.5, True, None, "1"],
    "prompt_logprobs": [0, 1, 96, 97, -1, 2**63, 2.5, True, None, "1"],
    "json_schema": [{"type": "integer"}, {"type": "nope"}, "not json", True, False, 5, "{}"],
    "regex": ["[0-9]+", "(", "a**", "", 5],
    "grammar": ["start: 'a'", "start: ", "", 5],
    "unknown": [1],
}
_BAD_LINES = [b"", b"   ", b"[]", b"5", b'"x"', b"null", b"{", b'{"prompt": "a"', b"\xff\xfe", b"\xef\xbb\xbf{}",
              b'{"prompt": "\\ud800"}', b'{"prompt": "a", "prompt": "b"}', b"{}" * 3]  # fmt: skip


@st.composite
def _lines(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(_BAD_LINES))
    line: dict[str, Any] = {"prompt": "ROMEO"} if draw(st.integers(0, 3)) else {}
    names = draw(st.lists(st.sampled_from(sorted(_LINE_FIELDS)), max_size=3, unique=True))
    line.update({name: draw(st.sampled_from(_LINE_FIELDS[name])) for name in names})
    if line.get("max_new_tokens") in (2**64, 10**6):
        line["max_new_tokens"] = 3  # a huge length runs (rightly) under --cache none: a hang, not a finding
    return json.dumps(line).encode()


def _batch(draw: st.DrawFn, cache: list[str]) -> tuple[list[str], list[bytes], str]:
    """`--input FILE --output FILE` (or a directory, a missing file, stdin) with hostile lines."""
    lines = draw(st.lists(_lines(), max_size=5))
    source = draw(st.sampled_from(["<file:0>"] * 6 + ["<dir>", "<missing>", "-", ""]))
    stdin = b"\n".join(lines).decode(errors="replace") if source == "-" else ""
    args = ["--input", source, "--output", draw(st.sampled_from(["<missing>"] * 6 + ["<dir>", "<file:0>", ""]))]
    args += _flag(draw, "--batch-size", INTS) + _flag(draw, "--on-error", ["skip", "fail", "", "nope"])
    args += ["--resume"] * (draw(st.integers(0, 4)) == 0)
    return args, lines, stdin


@st.composite
def generate_cases(draw: st.DrawFn) -> Case:
    common, cache = _common(draw)
    steps = _steps(draw, "--max-new-tokens", cache) if draw(st.integers(0, 4)) else []
    if not steps and cache[-1:] == ["none"]:
        steps = ["--max-new-tokens", "3"]  # the default, 100, is long for a fuzz case under --cache none
    args = common + steps + _flag(draw, "--strategy", STRATEGIES) + _flag(draw, "-n", INTS)
    args += _flag(draw, "--logprobs", INTS) + _flag(draw, "--prompt-logprobs", INTS) + _flag(draw, "--threads", INTS)
    args += ["--stop", _pick(draw, ["a", "", "\n", "ROMEO"])] * draw(st.integers(0, 2))
    args += ["--no-echo"] * draw(st.booleans())
    structured = draw(st.sampled_from([[], [], [], ["--json-schema"], ["--grammar"], ["--regex"]]))
    files: list[bytes] = []
    if structured == ["--regex"]:
        args += ["--regex", _pick(draw, ["[a-z]+", "(", "a**", "", ".*"])]
    elif structured:
        args += [*structured, draw(st.sampled_from(["<file:1>", "<file:1>", "<dir>", "<missing>", ""]))]
        files.append(b"")  # file 0, the --input, is written even when unused
        files.append(draw(st.sampled_from([b'{"type": "integer"}', b"{", b"[]", b"start: 'a'", b"start:", b"\xff"])))
    if draw(st.integers(0, 3)) == 0:
        batch, lines, stdin = _batch(draw, cache)
        files[:1] = [b"\n".join(lines) + b"\n" * draw(st.booleans())]
        argv = ["generate", *batch, *args]
        return Case(tuple(argv), tuple(files), stdin, output=True)
    prompt, stdin = _prompt(draw)
    json_out = draw(st.integers(0, 3)) > 0
    argv = ["generate", *([prompt] if prompt or draw(st.booleans()) else []), *args, *["--json"] * json_out]
    return Case(tuple(argv), tuple(files), stdin, json=json_out)


@st.composite
def explain_cases(draw: st.DrawFn) -> Case:
    common, cache = _common(draw)
    prompt, stdin = _prompt(draw)
    args = [prompt, *common, *(_steps(draw, "--steps", cache) if draw(st.integers(0, 3)) else ["--steps", "2"])]
    args += _flag(draw, "--top", INTS) + _flag(draw, "--plot-step", INTS)
    args += _flag(draw, "--plot", ["<dir>", "<missing>", "<missing>.png", "<dir>/x.png", "", "x.nope"])
    json_out = draw(st.integers(0, 3)) > 0
    return Case(("explain", *args, *["--json"] * json_out), (), stdin, json=json_out)


@st.composite
def samplers_cases(draw: st.DrawFn) -> Case:
    names = draw(st.lists(st.one_of(st.sampled_from([*SAMPLERS, "cfg", "speculative", "dense", MODEL]), TEXT)))
    json_out = draw(st.booleans())
    return Case(("samplers", *names, *["--json"] * json_out), json=json_out)


def _cases() -> st.SearchStrategy[Case]:
    return st.one_of(generate_cases(), generate_cases(), explain_cases(), samplers_cases())


class _Hang(BaseException):  # not an Exception: the CLI's own handlers cannot swallow it
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise _Hang(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _real(arg: str, root: Path) -> str:
    for mark, path in (("<dir>", root / "d"), ("<missing>", root / "missing"), ("<file:0>", root / "f0.jsonl"),
                       ("<file:1>", root / "f1")):  # fmt: skip
        arg = arg.replace(mark, str(path))
    return arg


def run_case(case: Case) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the case in a fresh directory; its result, and what is wrong with it (nothing, when it holds)."""
    with tempfile.TemporaryDirectory(prefix="cli-fuzz-") as tmp:
        root = Path(tmp)
        (root / "d").mkdir()
        for i, content in enumerate(case.files):
            (root / ("f0.jsonl" if i == 0 else f"f{i}")).write_bytes(content)
        argv = [_real(arg, root) for arg in case.argv]
        with _time_limit(TIME_LIMIT):
            result = run_cli(argv, _env(), stdin=case.stdin, cwd=root)
        problems = _problems(case, result, _output(argv))
    return result, problems


def _output(argv: list[str]) -> Path | None:
    """The --output file to check: not when it is the --input file (then it holds the prompts, not records)."""
    if "--output" not in argv:
        return None
    output = argv[argv.index("--output") + 1]
    return None if not output or output == argv[argv.index("--input") + 1] else Path(output)


def _problems(case: Case, result: subprocess.CompletedProcess[str], output: Path | None) -> list[str]:
    problems = []
    if result.returncode not in STATUSES:
        problems.append(f"exit status {result.returncode}")
    if "Traceback" in result.stderr or "Traceback" in result.stdout:
        problems.append("a traceback")
    if result.returncode != 0 and not result.stderr.strip():
        problems.append("failed and said nothing on stderr")
    if case.json and result.returncode == 0:
        try:
            json.loads(result.stdout)
        except ValueError as exc:
            problems.append(f"--json printed what is not JSON ({exc})")
    if output is not None and output.is_file():
        problems += _record_problems(output.read_text(errors="replace"))
    return problems


def _record_problems(text: str) -> list[str]:
    """Every --output line a JSON object naming its input line, with a result or an error; lines in order."""
    numbers = []
    for raw in text.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            return [f"--output line not JSON: {raw[:80]!r}"]
        if not isinstance(record, dict) or "line" not in record or not ({"tokens", "error"} & record.keys()):
            return [f"--output record without line, tokens or error: {raw[:80]!r}"]
        numbers.append(record["line"])
    return [] if numbers == sorted(set(numbers)) else [f"--output lines out of order or twice: {numbers}"]


FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,  # the same cases on every run: a failure is a regression, never luck
    database=None,
    deadline=None,  # two shared cores: a slow command is not a failure
    suppress_health_check=list(HealthCheck),
)


@FUZZ
@given(_cases())
def test_the_command_line_never_crashes(case: Case) -> None:
    result, problems = run_case(case)
    assert not problems, f"{problems}\n{case!r}\nstatus {result.returncode}\nstderr: {result.stderr[-2000:]}"

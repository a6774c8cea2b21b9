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
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli_runner import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import MODEL, _env

from decodekit.testing.fuzz.run import time_limit

EXAMPLES = int(os.environ.get("DECODEKIT_CLI_FUZZ_EXAMPLES", "40"))
STATUSES = {0, 1, 2}  # docs/cli.md, "Errors and exit status" (130 and 141 need a signal; none is sent here)
TIME_LIMIT = 60  # seconds one command may take: a hang is a finding

HUGE = ["18446744073709551616", "9223372036854775808", "100000000000000000000000000000"]
BAD_INTS = ["-1", "-0", "+2", " 2", "2.0", "1e3", "0x10", "nan", "inf", "", "abc", "\u0663", *HUGE]
BAD_FLOATS = ["nan", "inf", "-inf", "-1", "-0.0", "1e308", "1e309", "5e-324", "", "x", "1e-320", "0x1p3"]
BAD_VALUES = ["", "-1", "nan", "inf", "1e309", "2**64", "x=1", "'a'", "[1]", "{1: 2}", "{[1]: 2}", "(", "None", "True",
              "18446744073709551616", "0", "1e-320"]  # fmt: skip
STAGES = {  # sampler: valid arguments (the first of each list is used when no argument is written)
    "top_k": ["5", "k=1", "40"], "top_p": ["0.9", "p=1"], "temperature": ["0.7", "0", "1e4"], "top_h": ["0.5", "h=1"],
    "mirostat": ["", "tau=3", "tau=0, eta=1"], "mirostat_v2": ["", "tau=1e4"], "min_p": ["0.1"], "typical": ["0.9"],
    "xtc": ["threshold=0.1, probability=0.5"], "repetition_penalty": ["1.3", "1e4"], "top_n_sigma": ["1"],
    "dry": ["multiplier=0.8"], "logit_bias": ["{1: 2.0}"], "bad_words": ["[[1, 2]]"], "greedy": [""], "sample": [""],
    "adaptive_p": ["0.3", "target=-1", "target=1, decay=0"],
    "reasoning_budget": ["2, [1], [2]", "0, [1, 2], [3], open=true"],
}  # fmt: skip
BAD_CHAINS = ["|", "top_k(", "sample | top_k(3)", "[", "{}", "[]", '[{"name": "top_k", "params": {"k": -1}}]', "nope",
              '"greedy"', '[{"name": "top_p", "params": {"p": NaN}}]', "top_k(5) |", "top_k(5) | | greedy", "-" * 3000,
              ""]  # fmt: skip
STRATEGIES = (
    ["sample", "beam(num_beams=2)", "beam(num_beams=2, num_return_sequences=2)", "cfg", "cfg(scale=3, negative='a')",
     "cfg(scale=-2, negative=[[1], [2]])", "speculative", "speculative(k=2, ngram_size=1)",
     "speculative(draft='cli-test-gpt', k=2)", "beam", "beam(num_beams=3, early_stopping='never')",
     "beam(num_beams=3, length_penalty=-1, num_return_sequences=3)", "beam(num_beams=2, early_stopping=True)"],
    ["beam(num_beams=0)", "beam(num_beams=2, num_return_sequences=3)", "cfg(scale=nan)", "cfg(scale=1e308)",
     "cfg(negative='')", "cfg(negative=[])", "cfg(negative=[-1])", "speculative(k=0)", "speculative(draft='nope')",
     "speculative(k=65)", "nope", "", "beam(", "sample(x=1)", "cfg(negative=[[1], [2], [3], [4]])",
     "beam(num_beams=2, length_penalty=nan)", "beam(early_stopping='x')", "beam(num_beams=2**70)",
     "beam(num_return_sequences=0)"],
)  # fmt: skip
CACHES = (["dense", "gqa", "int8", "none", "window(size=4)", "h2o(budget=4)", "streaming", "snapkv", "tova"],
          ["window(size=0)", "nope", "", "dense(", "dense(x=1)", "h2o(budget=-1)"])  # fmt: skip
MODELS = ([MODEL], ["", "nope", f"{MODEL}(n_layer=-1)", f"{MODEL}(", "hf:", "hf:/nonexistent", "hf:<dir>"])
PROMPTS = (["ROMEO: ", "a", "Hello, world\n", "{", "12 34"], ["", "-", "--", "\u2665", "\n", "-x"])
COUNTS = ["0", "1", "2", "3"]
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


@dataclass(frozen=True)
class Case:
    """argv with `<dir>` (a directory), `<missing>` (a path to nothing) and `<file:N>` (`files[N]`'s path) made
    real in a fresh directory; stdin; whether the command prints JSON to check."""

    argv: tuple[str, ...]
    files: tuple[bytes, ...] = ()
    stdin: str = ""
    json: bool = False


class Draw:
    """hypothesis's `draw` and the case's hostility: the chance in ten that a value is a bad one (0: a case that
    must run, so that the commands' whole path is fuzzed, not their first check)."""

    def __init__(self, draw: st.DrawFn, rate: int | None = None) -> None:
        self.draw = draw
        self.rate = draw(st.sampled_from([0, 0, 1, 3])) if rate is None else rate

    def __call__(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.draw(strategy)

    def bad(self) -> bool:
        return bool(self.draw(st.integers(0, 9)) < self.rate)

    def pick(self, ok: Sequence[Any], bad: Sequence[Any], text: bool = False) -> Any:
        """A good value, or (at the case's rate) a bad one, sometimes any text at all."""
        if not self.bad():
            return self(st.sampled_from(ok))
        return self(st.one_of(st.sampled_from(bad), TEXT) if text else st.sampled_from(bad))

    def flag(self, name: str, ok: Sequence[str], bad: Sequence[str], text: bool = False) -> list[str]:
        """The flag with a value a third of the time."""
        return [name, self.pick(ok, bad, text)] if self(st.integers(0, 2)) == 0 else []


def _chain(d: Draw) -> str:
    if d.bad() and d(st.booleans()):
        return str(d(st.sampled_from(BAD_CHAINS)))
    names = d(st.lists(st.sampled_from(sorted(STAGES)), min_size=1, max_size=3))
    stages = [f"{n}({d.pick(STAGES[n], BAD_VALUES)})" if STAGES[n][0] or d(st.booleans()) else n for n in names]
    if d.bad():
        stages[-1] = d(st.sampled_from(["", "nope", "top_k(5", "top_k(5))", "🙂"]))
    return " | ".join(stages)


def _steps(d: Draw, name: str, cache: list[str]) -> list[str]:
    """A small count, or a bad one; never a huge one under `--cache none`, which crops the context and would
    (rightly) generate that many tokens."""
    value = str(d.pick(COUNTS, BAD_INTS))
    if value.strip().lstrip("+").isdigit() and int(value) > 8 and cache[-1:] == ["none"]:
        value = "3"
    return [name, value]


def _sampling(d: Draw) -> list[str]:
    if d(st.integers(0, 2)) == 0:
        return ["--chain", _chain(d)] + d.flag("--temperature", ["0.7"], ["0.7"]) * d.bad()  # both: refused
    args = d.flag("--temperature", ["0", "0.7", "1.5"], BAD_FLOATS, text=True)
    args += d.flag("--top-k", ["1", "5", "40", "96", "1000"], BAD_INTS, text=True)
    args += d.flag("--top-p", ["0.5", "0.9", "1"], [*BAD_FLOATS, "0", "1.5"])
    return args + d.flag("--repetition-penalty", ["1", "1.3"], [*BAD_FLOATS, "0"])


def _common(d: Draw) -> tuple[list[str], list[str]]:
    """Model, seed, cache and sampling flags (shared by generate and explain), and the cache flag alone."""
    args = ["-m", d.pick(*MODELS, text=True)] if not d.bad() or d(st.booleans()) else []
    cache = d.flag("--cache", *CACHES)
    args += d.flag("--seed", ["0", "7", "18446744073709551615"], BAD_INTS) + cache + _sampling(d)
    # cli-test-gpt's tokenizer has no errors= (nor token_bytes, which --regex/--grammar/--json-schema need): rare
    args += ["--replace-unknown"] * (d.bad() and d(st.booleans())) + ["--ignore-eos"] * d(st.booleans())
    return args, cache


def _prompt(d: Draw) -> tuple[str, str]:
    """The prompt argument and stdin ('-' reads it)."""
    prompt = str(d.pick(*PROMPTS, text=True))
    return prompt, (d(st.sampled_from(["ROMEO", "", "\n", "a\n\n"])) if prompt == "-" else "")


_LINE_FIELDS: dict[str, tuple[list[Any], list[Any]]] = {
    "prompt": (["ROMEO", "a b", "{}"], ["", 5, None, ["a"], "\u2665", "a" * 200]),
    "id": (["x", 1, "y"], [-1, 1.5, None, [], {}, True, "x"]),
    "seed": ([0, 5, 2**64 - 1], [-1, 2**64, 1.5, "3", True, math.nan]),
    "max_new_tokens": ([0, 1, 3, 2.0], [-1, 2**64, 1.5, "3", None, 10**6, True, [], {}, 2**63, -(2**63), "0x3"]),
    "chain": (["greedy", "top_h(0.5) | sample", [{"name": "top_k", "params": {"k": 3}}], "mirostat(tau=2)"],
              ["top_k(", [], {}, [{"name": "top_h", "params": {"h": 2}}], 5, "mirostat(tau=-1)"]),
    "n": ([1, 2, 3], [0, -1, 2**64, 10**9, 1.5, True, "2"]),
    "logprobs": ([0, 2, 96], [-1, 97, 2**63, 1.5, True, "1"]),
    "prompt_logprobs": ([0, 1, 96], [97, -1, 2**63, 2.5, True, "1"]),
    "json_schema": ([{"type": "integer"}, "{}", True], [{"type": "nope"}, "not json", False, 5]),
    "regex": (["[0-9]+", "a|b"], ["(", "a**", "", 5]),
    "grammar": (["start: \"a\"+"], ["start: ", "", 5]),
    "unknown": ([], [1]),
}  # fmt: skip
_BAD_LINES = [b"", b"   ", b"[]", b"5", b'"x"', b"null", b"{", b'{"prompt": "a"', b"\xff\xfe", b"\xef\xbb\xbf{}",
              b'{"prompt": "\\ud800"}', b'{"prompt": "a", "prompt": "b"}', b"{}" * 3]  # fmt: skip


@st.composite
def _lines(draw: st.DrawFn, rate: int) -> bytes:
    d = Draw(draw, rate)
    if d.bad() and d(st.booleans()):
        return bytes(d(st.sampled_from(_BAD_LINES)))
    line: dict[str, Any] = {}
    names = d(st.lists(st.sampled_from(sorted(_LINE_FIELDS)), max_size=3, unique=True))
    for name in ["prompt", *names]:
        ok, bad = _LINE_FIELDS[name]
        if name != "prompt" or not d.bad():  # a line without its prompt, at the case's rate
            line[name] = d.pick(ok or bad, bad)
    if line.get("max_new_tokens") in (2**64, 10**6):
        line["max_new_tokens"] = 3  # a huge length runs (rightly) under --cache none: a hang, not a finding
    if len({"json_schema", "regex", "grammar"} & line.keys()) > 1 and not d.bad():
        line.pop("regex", None), line.pop("grammar", None)  # one of them, unless the case is hostile
    return json.dumps(line).encode()


def _batch(d: Draw) -> tuple[list[str], list[bytes], str]:
    """`--input FILE --output FILE` (or a directory, a missing file, stdin) with hostile lines."""
    lines = d(st.lists(_lines(d.rate), max_size=5))
    source = d.pick(["<file:0>", "-"], ["<dir>", "<missing>", "", "<file:1>"])
    stdin = b"\n".join(lines).decode(errors="replace") if source == "-" else ""
    args = ["--input", source, "--output", d.pick(["<missing>"], ["<dir>", "<file:0>", "", "<dir>/x/y"])]
    args += d.flag("--batch-size", ["1", "2", "8"], BAD_INTS) + d.flag("--on-error", ["skip", "fail"], ["", "nope"])
    return args + ["--resume"] * (d(st.integers(0, 4)) == 0), lines, stdin


def _structured(d: Draw) -> tuple[list[str], bytes]:
    """One of --json-schema FILE, --grammar FILE, --regex TEXT (rarely), or more than one; the file's content."""
    kind = d(st.sampled_from(["", "--json-schema", "--grammar", "--regex"])) if d(st.integers(0, 5)) == 0 else ""
    if kind == "--regex":
        return ["--regex", d.pick(["[a-z]+", "a|b", "[0-9]{1,3}"], ["(", "a**", "", ".*", "\\"])], b""
    if not kind:
        return [], b""
    content = {"--json-schema": [b'{"type": "integer"}', b"true"], "--grammar": [b'start: "a"+']}[kind]
    bad = [b"{", b"[]", b"start:", b"\xff", b"", b'{"type": "nope"}']
    args = [kind, d.pick(["<file:1>"], ["<dir>", "<missing>", ""])] + ["--regex", "a"] * (d.bad() and d(st.booleans()))
    return args, d.pick(content, bad)


@st.composite
def generate_cases(draw: st.DrawFn) -> Case:
    d = Draw(draw)
    common, cache = _common(d)
    steps = _steps(d, "--max-new-tokens", cache) if d(st.integers(0, 4)) else []
    if not steps and cache[-1:] == ["none"]:
        steps = ["--max-new-tokens", "3"]  # the default, 100, is long for a fuzz case under --cache none
    args = common + steps + d.flag("--strategy", *STRATEGIES)
    args += d.flag("-n", ["1", "2", "3", "4"], ["0", "5", *BAD_INTS])
    args += d.flag("--logprobs", ["0", "2", "96"], ["97", *BAD_INTS])
    args += d.flag("--prompt-logprobs", ["0", "1", "96"], ["97", *BAD_INTS])
    args += d.flag("--threads", ["1"], ["0", "3", *BAD_INTS])
    args += ["--stop", d.pick(["a", "\n", "ROMEO"], ["", "-"])] * d(st.integers(0, 2))
    args += ["--no-echo"] * d(st.booleans())
    structured, content = _structured(d)
    args += structured
    if d(st.integers(0, 3)) == 0:
        batch, lines, stdin = _batch(d)
        files = (b"\n".join(lines) + b"\n" * d(st.booleans()), content)
        return Case(("generate", *batch, *args, *["--json"] * (d.bad() and d(st.booleans()))), files, stdin)
    prompt, stdin = _prompt(d)
    json_out = d(st.integers(0, 3)) > 0
    argv = ("generate", *([prompt] if prompt or d(st.booleans()) else []), *args, *["--json"] * json_out)
    return Case(argv, (b"", content), stdin, json=json_out)


@st.composite
def explain_cases(draw: st.DrawFn) -> Case:
    d = Draw(draw)
    common, cache = _common(d)
    prompt, stdin = _prompt(d)
    args = [prompt, *common, *(_steps(d, "--steps", cache) if d(st.integers(0, 3)) else ["--steps", "2"])]
    args += d.flag("--top", ["1", "5", "96", "1000"], ["0", *BAD_INTS]) + d.flag("--plot-step", COUNTS, BAD_INTS)
    args += d.flag("--plot", ["<missing>.png", "<missing>.svg"], ["<dir>", "<missing>", "<dir>/x/y.png", "", "x.nope"])
    json_out = d(st.integers(0, 3)) > 0
    return Case(("explain", *args, *["--json"] * json_out), (), stdin, json=json_out)


@st.composite
def samplers_cases(draw: st.DrawFn) -> Case:
    d = Draw(draw)
    known = [*STAGES, "cfg", "speculative", "beam", "dense", "int8", MODEL]
    names = [d.pick(known, ["nope", "", "top-k", "TOP_K", "-"], text=True) for _ in range(d(st.integers(0, 3)))]
    json_out = d(st.booleans())
    return Case(("samplers", *names, *["--json"] * json_out), json=json_out)


def _cases() -> st.SearchStrategy[Case]:
    return st.one_of(generate_cases(), generate_cases(), generate_cases(), explain_cases(), samplers_cases())


def _real(arg: str, root: Path) -> str:
    for mark, path in (("<dir>", root / "d"), ("<missing>", root / "new"), ("<file:0>", root / "f0"),
                       ("<file:1>", root / "f1")):  # fmt: skip
        arg = arg.replace(mark, str(path))
    return arg


def run_case(case: Case) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the case in a fresh directory; its result, and what is wrong with it (nothing, when it holds)."""
    with tempfile.TemporaryDirectory(prefix="cli-fuzz-") as tmp:
        root = Path(tmp)
        (root / "d").mkdir()
        for i, content in enumerate(case.files):
            (root / f"f{i}").write_bytes(content)
        argv = [_real(arg, root) for arg in case.argv]
        with time_limit(TIME_LIMIT):  # a hang fails the case: CaseTimeout
            result = run_cli(argv, _env(), stdin=case.stdin, cwd=root)
        output = _output(argv, root)
        problems = _problems(case, result, output)
        if output is not None and output.is_file() and not problems and "--resume" not in argv:
            problems += _alone_problems(argv, root, output, _input_lines(case))
    return result, problems


def _input_lines(case: Case) -> list[bytes]:
    """The --input lines the command read (a file's or stdin's)."""
    source = case.argv[case.argv.index("--input") + 1]
    data = case.stdin.encode() if source == "-" else case.files[0] if source == "<file:0>" else b""
    return data.split(b"\n")


def _alone_problems(argv: list[str], root: Path, output: Path, lines: list[bytes]) -> list[str]:
    """A batch job's first two results are what their lines give alone, with the seed the record names (lines that
    differ only in max_new_tokens share a decode, each row ending at its own limit)."""
    records = [json.loads(raw) for raw in output.read_text().splitlines()]
    problems = []
    for record in [r for r in records if "error" not in r][:2]:
        try:
            line = json.loads(lines[record["line"] - 1])
        except (IndexError, ValueError):
            continue
        if not isinstance(line, dict):
            continue
        (root / "alone").write_text(json.dumps(line | {"seed": record["seed"]}) + "\n")
        again = [a for a in argv if a != "--resume"]
        again[again.index("--input") + 1], again[again.index("--output") + 1] = str(root / "alone"), str(root / "out1")
        (root / "out1").unlink(missing_ok=True)
        with time_limit(TIME_LIMIT):
            run_cli(again, _env(), cwd=root)
        alone = json.loads((root / "out1").read_text().splitlines()[0]) if (root / "out1").is_file() else {}
        if _sequences(alone) != _sequences(record):
            problems.append(f"--input line {record['line']}: {_sequences(record)} in the job, alone {alone}"[:300])
    return problems


def _output(argv: list[str], root: Path) -> Path | None:
    """The --output file to check: one the command made (a file there before holds something else)."""
    return root / "new" if "--output" in argv and argv[argv.index("--output") + 1] == str(root / "new") else None


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
            doc = json.loads(result.stdout, parse_constant=_no_constant)
        except ValueError as exc:
            problems.append(f"--json printed what is not JSON ({exc})")
        else:
            problems += _generate_problems(case.argv, doc) if case.argv[0] == "generate" else []
    if output is not None and output.is_file():
        problems += _record_problems(output.read_text(errors="replace"))
    return problems


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # Python's json writes NaN and Infinity; JSON has neither


def _option(argv: Sequence[str], name: str) -> int | None:
    """The value of the option's last occurrence, as an int (the command accepted it)."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]
    if not values:
        return None
    try:
        return int(values[-1])
    except ValueError:  # "2.0": the command line reads an integral float as that int, as pydantic does
        return int(float(values[-1]))


def _generate_problems(argv: Sequence[str], doc: Any) -> list[str]:
    """--json of generate: every sample's tokens at most --max-new-tokens, with one logprobs entry per token and
    top lists of --logprobs; the prompt's scores one per token, the first null, ranks in [1, 96], --prompt-logprobs
    long."""
    problems = []
    steps, n, prompt_n = (_option(argv, name) for name in ("--max-new-tokens", "--logprobs", "--prompt-logprobs"))
    for sample in doc["samples"]:
        if steps is not None and len(sample["tokens"]) > steps:
            problems.append(f"{len(sample['tokens'])} tokens, --max-new-tokens {steps}")
        if n is not None and len(sample["logprobs"]) != len(sample["tokens"]):
            problems.append(f"{len(sample['logprobs'])} logprobs for {len(sample['tokens'])} tokens")
        if n is not None and any(len(lp["top"]) != n or len(lp["processed_top"]) > n for lp in sample["logprobs"]):
            problems.append(f"a logprobs top list not {n} long")
    problems += _sample_problems(argv, doc, steps)
    if prompt_n is not None:
        scores = doc["prompt_logprobs"]
        if not scores or scores[0] is not None:
            problems.append(f"prompt_logprobs {str(scores)[:80]}: not a list whose first entry is null")
        elif any(not 1 <= s["rank"] <= 96 or len(s["top"]) != prompt_n for s in scores[1:]):
            problems.append(f"prompt_logprobs: a rank outside [1, 96] or a top list not {prompt_n} long")
    return problems


def _sample_problems(argv: Sequence[str], doc: Any, steps: int | None) -> list[str]:
    """-n N (or a beam's num_return_sequences): N samples (a beam search: at most N), each one's logprobs for its own
    tokens; a beam's scores finite, best first. A beam search of no steps (or interrupted) prints its one sample."""
    samples, strategy = doc["samples"], str(doc.get("strategy") or "")
    beam = strategy.startswith("beam")
    returned = re.search(r"num_return_sequences=(\d+)", strategy)
    n = _option(argv, "-n") or (int(returned.group(1)) if returned else 1)
    if beam and (steps == 0 or doc["interrupted"]):
        n = 1
    # A beam search finds fewer where the chain leaves fewer continuations (strategies.md; the CLI says so).
    fits = 1 <= len(samples) <= n if beam else len(samples) == n
    problems = [f"{len(samples)} samples, {n} asked ({strategy})"] * (not fits)
    for sample in samples:
        if sample.get("logprobs") is not None and [lp["token"] for lp in sample["logprobs"]] != sample["tokens"]:
            problems.append("a sample's logprobs are not of its own tokens")
    scores = [sample.get("score") for sample in samples]
    ranked = all(isinstance(x, float) and math.isfinite(x) for x in scores) and scores == sorted(scores)[::-1]
    if beam and n > 1 and not ranked:
        problems.append(f"beam scores {scores}: not finite, best first")
    return problems


def _sequences(record: dict[str, Any]) -> list[list[int]]:
    """A record's token lists: its one sequence's, or each of its samples'."""
    return [s.get("tokens", []) for s in record.get("samples", [record])]


def _record_problems(text: str) -> list[str]:
    """Every --output line a JSON object naming its input line, with a result or an error; lines in order."""
    numbers = []
    for raw in text.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            return [f"--output line not JSON: {raw[:80]!r}"]
        if not isinstance(record, dict) or "line" not in record or not ({"tokens", "samples", "error"} & record.keys()):
            return [f"--output record without line, tokens, samples or error: {raw[:80]!r}"]
        numbers.append(record["line"])
        limit = record.get("max_new_tokens")
        if isinstance(limit, int) and any(len(tokens) > limit for tokens in _sequences(record)):
            return [f"--output line {record['line']}: more tokens than max_new_tokens {limit}"]
        if "samples" in record and not 1 <= len(record["samples"]) <= record["n"]:  # a beam search may find fewer
            return [f"--output line {record['line']}: {len(record['samples'])} samples of n={record['n']}"]
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

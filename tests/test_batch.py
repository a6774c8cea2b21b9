"""`decodekit generate --input prompts.jsonl --output results.jsonl`: batches, resume, bad lines.

Runs the CLI in subprocesses with the tiny `cli-test-gpt` model (see test_cli.py).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from test_cli import MODEL, _env, _popen, cli, cli_many

N = 200
ARGS = ["-m", MODEL, "--seed", "11", "--max-new-tokens", "6", "--temperature", "1.5", "--cache", "none"]


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


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("batch")
    prompts, out = _prompts(root / "prompts.jsonl"), root / "reference.jsonl"
    r = cli("generate", "--input", str(prompts), "--output", str(out), "--batch-size", "16", *ARGS)
    assert r.returncode == 0, r.stderr
    return prompts, out.read_text()


def test_results_name_their_prompt_and_request(reference: tuple[Path, str]) -> None:
    results = [json.loads(line) for line in reference[1].splitlines()]
    assert len(results) == N
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


def _interrupted_run(prompts: Path, out: Path, batch_size: int) -> int:
    """Start the run, Ctrl-C it once a few results are written; the number written."""
    args = ["generate", "--input", str(prompts), "--output", str(out), "--batch-size", str(batch_size), *ARGS]
    p = _popen(args, _env())
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_text().count("\n") >= 20:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err and "--resume continues" in err, err
    return out.read_text().count("\n")


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
        f.write('{"id": "p999", "pro')  # as if killed in the middle of a write: resume drops it
    args = ["generate", "--input", str(prompts), "--output", str(out), "--batch-size", str(batch_size), *ARGS]
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert f"{N - written} results written" in r.stderr and f"{written} already there" in r.stderr
    assert out.read_text() == expected


def test_bad_lines_are_reported_with_their_number(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    good = json.dumps({"prompt": "ROMEO: "})
    bad = ['{"prompt": ', '{"prompt": "x", "temp": 2}', '{"prompt": "x", "chain": "top_k(0)"}', '["ROMEO"]']
    prompts.write_text("\n".join([good, *bad, good, json.dumps({"prompt": "y", "id": 1})]) + "\n")
    out, skipped = tmp_path / "out.jsonl", tmp_path / "skip.jsonl"
    fail, skip = cli_many(
        ["generate", "--input", str(prompts), "--output", str(out), *ARGS],
        ["generate", "--input", str(prompts), "--output", str(skipped), "--on-error", "skip", *ARGS],
    )
    exists = cli("generate", "--input", str(prompts), "--output", str(skipped), *ARGS)
    assert fail.returncode == 2 and len(fail.stderr.splitlines()) == 1 and not out.exists()
    assert "line 2: not JSON" in fail.stderr and "--on-error skip" in fail.stderr
    assert skip.returncode == 0, skip.stderr
    warnings = [line for line in skip.stderr.splitlines() if "warning" in line]
    assert [w.split("line ")[1].split(":")[0] for w in warnings] == ["2", "3", "4", "5", "7"]
    assert "unknown parameter temp=2" in warnings[1] and "top_k: k=0" in warnings[2]
    assert "id 1 is also the id of line 1" in warnings[4]
    assert [json.loads(line)["id"] for line in skipped.read_text().splitlines()] == [1, 6]
    assert exists.returncode == 2 and "--resume continues it" in exists.stderr


def test_batch_options_are_checked_before_loading() -> None:
    cases = {
        "no output": (["generate", "--input", "p.jsonl", "-m", MODEL], "--output is missing"),
        "with a prompt": (["generate", "ROMEO", "--input", "p", "--output", "o", "-m", MODEL], "with PROMPT"),
        "with --json": (["generate", "--input", "p", "--output", "o", "--json", "-m", MODEL], "with --json"),
        "no file": (["generate", "--input", "/nonexistent.jsonl", "--output", "o", "-m", MODEL], "cannot read it"),
    }
    for (name, (_, expected)), r in zip(cases.items(), cli_many(*(args for args, _ in cases.values()))):
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, (name, r.stderr)
        assert expected in r.stderr, (name, r.stderr)


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

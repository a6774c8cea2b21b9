"""The batch job on Ray Data: record for record what one local process writes (a line's logprobs to the model's
rounding), through a killed actor, a killed driver and `--resume`, and from Python over a Dataset.

The tests start a Ray cluster of 2 CPUs on this machine and stop it. Its workers import the test
plugins of the repository's `tests/` (`cli-test-gpt`, and `fail_on`, a sampler that fails while
decoding the prompts that hold a "!"; cli_strategy_plugin's strategies with result fields of their own): the cluster
is started with them on its PYTHONPATH, and the command sends DECODEKIT_EXTRA_PLUGINS with its job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import decodekit_ray
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import ray.data
from decodekit_ray import BatchSettings
from decodekit_ray.parts import Parts
from decodekit_ray.ray_output import DIED
from test_cli import MODEL, TESTS, _env, _popen, cli

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),  # Ray Data's own, on its own options
    pytest.mark.xdist_group("ray"),  # one Ray cluster, in one worker
]

PLUGINS = "cli_testplugin,batch_testplugin"
PLUGIN_ENV = {"DECODEKIT_EXTRA_PLUGINS": PLUGINS}
STRATEGY_ENV = {"DECODEKIT_EXTRA_PLUGINS": f"{PLUGINS},cli_strategy_plugin"}
CHAIN = "fail_on(token=2) | temperature(1.5)"  # token 2 is "!"
ARGS = ["-m", MODEL, "--seed", "5", "--max-new-tokens", "40", "--chain", CHAIN, "--cache", "dense"]
ARGS += ["--batch-size", "4", "--on-error", "skip"]
N = 40  # 10 blocks of 4: every kind of line below
STILL_S, LONGEST_S = 240, 900  # a held job whose actors stand still so long is stalled; one this long at all is
T = TypeVar("T")
BAD = {  # line -> what it holds: each must become the same error record on Ray as here
    5: b'{"prompt": "b", "seed": 18446744073709551616}',
    9: b'{"prompt": "c", "max_new_tokens": 128}',
    13: b'{"prompt": ',
    17: b'{"prompt": "\xff"}',
    21: b'{"prompt": "d", "id": "p0"}',
    25: b'{"prompt": "fails while decoding!"}',
}


def _line(i: int) -> bytes:
    """Line i (1-based): prompts of several lengths; some with their own id, seed, length, chain, logprobs, n,
    stop or include_stop."""
    if i in BAD:
        return BAD[i]
    line: dict[str, object] = {"prompt": f"Line {i}: " + "abcd"[: i % 5]}
    if i % 3 == 1:
        line["id"] = f"p{i - 1}"
    if i % 7 == 0:
        line["seed"] = 2**64 - i
    if i % 11 == 0:
        line["max_new_tokens"] = 3
    if i % 29 == 0:
        line["chain"] = "fail_on(token=2) | top_k(5)"
    if i % 6 == 0:
        line["logprobs"] = 2
    if i % 8 == 0:
        line["prompt_logprobs"] = 1  # line 24: both, in a batch of its own
    if i % 10 == 3:
        line["n"] = 2  # two samples in one record (line 33 of 3 tokens)
    if i % 9 == 4:
        line["stop"] = ["e", " "] if i % 2 else "a"  # its own stop strings: in batches of their own
    if i % 18 == 13:
        line["include_stop"] = True  # line 31 keeps the stop string that ends it (line 13 is bad)
    if i == 2:
        line["id"] = "x\u2028y"  # a raw line separator: one line all the same
    return json.dumps(line, ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster of 2 CPUs; its address, for the command's --ray."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), saved]))
    try:  # the cluster's processes start with this environment: its workers find the test plugins
        ray.init(
            address="local",  # a new cluster, even where another one runs
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            # a command run in this process joins as this driver, with its plugins: every test's
            runtime_env={"env_vars": STRATEGY_ENV},
        )
    finally:  # ray.init also set RAY_AUTH_MODE=token here: the commands' processes join with it
        os.environ.pop("PYTHONPATH")
        os.environ.update({} if saved is None else {"PYTHONPATH": saved})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """The input, what one local process writes for it, and what it prints on stderr but its summary line."""
    root = tmp_path_factory.mktemp("ray")
    prompts = root / "prompts.jsonl"
    prompts.write_bytes(b"".join(_line(i) + b"\n" for i in range(1, N + 1)))
    out = root / "local.jsonl"
    r = cli("generate", "--input", str(prompts), "--output", str(out), *ARGS, DECODEKIT_EXTRA_PLUGINS=PLUGINS)
    assert r.returncode == 0, r.stderr
    *warnings, last = r.stderr.splitlines()
    assert last == f"{N - 6} results and 6 error records written to {out}", r.stderr
    return prompts, out.read_text(), warnings


def _to_rounding(records: list[str]) -> list[Any]:
    """The records as compared with the local job's: byte for byte, but a line asking for logprobs, whose batch
    here may hold other lines than on Ray (the local job gathers a batch's lines from further ahead than a Ray
    block holds), by its fields with each float to the model's rounding (a float32 model's a few 1e-6 apart)."""

    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return _Close(value)
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return {k: rounded(v) for k, v in value.items()} if isinstance(value, dict) else value

    return [rounded(json.loads(r)) if '"logprobs": [' in r or '"prompt_logprobs": [' in r else r for r in records]


class _Close:
    """A float equal to any within 1e-5 (the repr shows it, for a failing assertion)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Close) and math.isclose(self.value, other.value, rel_tol=1e-5, abs_tol=1e-5)

    def __repr__(self) -> str:
        return f"~{self.value!r}"


def _on_ray(prompts: Path, out: Path, address: str, *extra: str, hold: Path | None = None) -> subprocess.Popen[str]:
    """The command on Ray; with `hold`, each actor decodes the first batch it runs, then waits while that file exists
    (batch_testplugin's hold)."""
    args = ["generate", "--input", str(prompts), "--output", str(out), *ARGS, "--ray", address, *extra]
    held = {"DECODEKIT_TEST_HOLD": str(hold)} if hold else {}
    return _popen(args, _env(DECODEKIT_EXTRA_PLUGINS=PLUGINS, **held))


def _wait_for_a_part(out: Path, job: subprocess.Popen[str], hold: Path) -> None:
    """Wait until the job has written a part file."""
    parts = out.with_name(out.name + ".parts")
    _wait(job, hold, lambda: next(parts.glob("*.parquet"), None) if parts.exists() else None, "the job wrote no part")


def _complete_parts(out: Path) -> dict[int, str]:
    """The records of the job's complete part files, by line (a part cut short by a kill is not one)."""
    parts = Parts()
    for path in out.with_name(out.name + ".parts").glob("*.parquet"):
        with contextlib.suppress(OSError, pa.ArrowException):
            parts.add(pq.read_table(path))
    return parts.records


def _wait(job: subprocess.Popen[str], hold: Path, done: Callable[[], T | None], what: str) -> T:
    """What `done()` returns once it is not None. Fails once the decoding actors stood still (their states and
    pids, and which of them wait at the hold) for `STILL_S`, however long they took to get there: at load 31 on
    2 cores their model loads alone took over 130 s, and a wait of 240 s from the start failed a job that was
    only slow. Or after `LONGEST_S` in all (an actor that dies and starts again without end)."""
    start = since = time.monotonic()
    seen = _where(hold)
    while job.poll() is None:
        got = done()
        if got is not None:
            return got
        now, where = time.monotonic(), _where(hold)
        if where != seen:
            seen, since = where, now
        if now - since > STILL_S or now - start > LONGEST_S:
            break
        time.sleep(0.05)
    _stalled(job, what, hold)


def _where(hold: Path) -> tuple[list[tuple[str, int]], list[int]]:
    """The decoding actors of the cluster (state, pid), and the pids that waited at the hold."""
    from ray._private.state import actors

    pool = sorted((a["State"], a["Pid"]) for a in actors().values() if "LineDecoder" in a["ActorClassName"])
    return pool, sorted(_at_hold(hold))


def _at_hold(hold: Path) -> set[int]:
    return {int(path.suffix[1:]) for path in hold.parent.glob(hold.name + ".*")}


def _stalled(job: subprocess.Popen[str], what: str, hold: Path) -> NoReturn:
    """Fail, saying what the job printed and where its actors were: at the hold with a batch in hand, each past
    the batch it decoded first (whose records the job did not write), or not (actors never started, or stalled)."""
    pool, held = _where(hold)
    job.kill()
    _, err = job.communicate(timeout=60)
    where = f"decoding actors (state, pid) {pool}; pids that waited at the hold {held}"
    raise AssertionError(f"{what} (exit status {job.returncode}); {where}: {err[-3000:]}")


def _job_ids() -> set[str]:
    """The jobs the test's cluster has seen so far (their drivers alive or not)."""
    from ray._private.state import jobs

    return {job["JobID"] for job in jobs()}


def _held_actors(hold: Path, job: subprocess.Popen[str], not_of: Collection[str]) -> list[int]:
    """The processes of the job's two decoding actors, once both wait at the hold with a batch in hand.
    Told from the actors of the jobs `not_of` (a killed driver's actors may live on a while) by the
    cluster's actor table, not the machine's process list. (The public state API needs the dashboard.)"""
    from ray._private.state import actors

    def both() -> list[int] | None:
        ours = {
            a["Pid"]
            for a in actors().values()
            if a["State"] == "ALIVE" and "LineDecoder" in a["ActorClassName"] and a["JobID"] not in not_of
        }
        held = sorted(ours & _at_hold(hold))
        return held if len(held) == 2 else None

    return _wait(job, hold, both, "the job's two actors never both waited at the hold")


def test_reference_has_every_kind_of_record(reference: tuple[Path, str, list[str]]) -> None:
    records = [json.loads(line) for line in reference[1].splitlines()]
    assert [r["line"] for r in records] == list(range(1, N + 1))
    errors = {r["line"]: r["error"]["type"] for r in records if "error" in r}
    assert errors == {
        5: "ParameterError",
        9: "ContextLengthError",
        13: "JSONDecodeError",
        17: "UnicodeDecodeError",
        21: "ParameterError",
        25: "NumericsError",  # on decoding: its batch is retried row by row, the others are results
    }
    assert records[1]["id"] == "x\u2028y" and records[6]["seed"] == 2**64 - 7
    assert [r["line"] for r in records if "logprobs" in r] == [6, 12, 18, 24, 30, 36]
    assert [r["line"] for r in records if "prompt_logprobs" in r] == [8, 16, 24, 32, 40]
    assert [(r["line"], len(r["samples"])) for r in records if "samples" in r] == [(3, 2), (23, 2), (33, 2)]
    assert records[30]["stopped_by"] == " " and records[30]["text"].endswith(" ")  # its include_stop
    assert all("text" in e and "top_texts" in e for r in records for e in r.get("logprobs", []))


def test_on_ray_killed_resumed_and_an_actor_killed_equals_local(
    cluster: str, reference: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    """The driver killed outright: its complete parts count on --resume, which finishes the job on Ray; an
    actor killed in the resumed run has its batch retried by Ray: still every line once, as one process
    writes it, and the run prints what it prints. (One test for both kills: a Ray job costs ~15 s to start
    on this machine.) Each kill comes while the job's actors wait at a hold: there is work left, on any machine.

    Every --ray run printed Ray's core-worker ERROR line about Ray Data's actor constructor arguments
    (ray-project/ray#53727): the resumed run's stderr is the local run's warnings on the input's lines and
    its summary, nothing else but one warning on the killed actor. (Checked here, not in a job of its own:
    another ~15 s.)"""
    prompts, expected, warnings = reference
    out, hold = tmp_path / "ray.jsonl", tmp_path / "hold"
    # Each actor decodes the first batch it runs, then waits at the hold. Which batch is Ray's choice: Ray Data's
    # actors run the calls handed to them in any order, and a hold on fixed lines (after line 10) stalled 2 of ~40
    # CI runs with no part written (both actors can run a held batch first, a free one queued behind it). So the
    # job writes a part and leaves at least 7 of its 9 batches.
    hold.touch()
    job = _on_ray(prompts, out, cluster, "--ray-actors", "2", hold=hold)
    _wait_for_a_part(out, job, hold)  # one: Ray's one writer may not have reached the other batch yet
    job.send_signal(signal.SIGKILL)
    job.communicate(timeout=60)
    old_jobs = _job_ids()  # before the resumed run starts: its actors are the ones of no job here
    assert out.with_name(out.name + ".parts").exists() and not out.exists()
    # The killed run's records, already there for the resumed run: at least these (a part its worker was still
    # writing may complete after the driver's kill, and counts too).
    left = _complete_parts(out)
    # Without --resume the parts are not thrown away; refused before Ray is reached, so run in this process.
    refused = cli("generate", "--input", str(prompts), "--output", str(out), *ARGS, "--ray", cluster, **PLUGIN_ENV)
    assert refused.returncode == 2 and "--resume --ray continues it" in refused.stderr, refused.stderr
    resumed = _on_ray(prompts, out, cluster, "--resume", "--ray-actors", "2", hold=hold)
    os.kill(_held_actors(hold, resumed, not_of=old_jobs)[0], signal.SIGKILL)
    hold.unlink()
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    # The killed actor is one warning at most (Ray's note on it reaches the command when Ray sends it).
    said = err.splitlines()
    died = f"decodekit: warning: {DIED}"
    assert said.count(died) <= 1, err
    *printed, summary = [line for line in said if line != died]
    assert printed == warnings, err
    found = re.fullmatch(
        rf"(\d+) results and (\d+) error records written to {re.escape(str(out))}(, (\d+) already there)?", summary
    )
    assert found is not None, summary
    results, errors, already = int(found[1]), int(found[2]), int(found[4] or 0)
    assert results + errors + already == N and already >= len(left) and errors <= 6, summary
    assert _to_rounding(out.read_text().splitlines()) == _to_rounding(expected.splitlines())
    assert not out.with_name(out.name + ".parts").exists()


CHAIN_SPEC = [{"name": "top_k", "params": {"k": 5}}, {"name": "sample"}]
CHAIN_ROWS = [  # numbered after the input's lines: one Dataset holds both
    {"line": N + 1, "prompt": "ROMEO: ", "seed": 3, "chain": "top_k(5) | sample"},
    {"line": N + 2, "prompt": "ROMEO: ", "seed": 3, "chain": CHAIN_SPEC},
    {"line": N + 3, "prompt": "ROMEO: ", "seed": 3, "chain": None},
]


@pytest.fixture(scope="module")
def over_a_dataset(reference: tuple[Path, str, list[str]], cluster: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """One `decodekit_ray.generate` for the two tests below (an actor pool costs ~8 s to start here): the
    fields of the input's lines, and `CHAIN_ROWS`; (the input's rows, every record)."""
    rows = []
    for number, data in enumerate(reference[0].read_bytes().split(b"\n")[:N], 1):  # every kind of line, and line 29
        if number not in (13, 17, 21):  # not JSON, not UTF-8, and an id another row has: no fields to give
            rows.append({"line": number, **json.loads(data)})
    settings = BatchSettings(model=MODEL, chain=CHAIN, max_new_tokens=40, seed=5, cache="dense")
    # The chain rows a block each: their types do not merge (Arrow refused it); two in a block: Ray pickles them.
    chains = ray.data.from_items(CHAIN_ROWS, override_num_blocks=3)
    ds = ray.data.from_items(rows).union(chains, ray.data.from_items(CHAIN_ROWS[:2], override_num_blocks=1))
    return rows, decodekit_ray.generate(ds, settings, batch_size=4, actors=2).take_all()


def test_generate_over_a_dataset_of_fields(
    reference: tuple[Path, str, list[str]], over_a_dataset: tuple[list[dict[str, Any]], list[Any]]
) -> None:
    """`decodekit_ray.generate`: rows of a line's fields in, the command's records out (a bad row an error)."""
    expected = reference[1].splitlines(keepends=True)
    rows, every = over_a_dataset
    records = [r for r in every if r["line"] <= N]
    assert sorted(r["line"] for r in records) == [row["line"] for row in rows]
    by_line = {r["line"]: r["record"] for r in records}
    assert _to_rounding([by_line[row["line"]] for row in rows]) == _to_rounding(
        [expected[row["line"] - 1] for row in rows]
    )
    held = [json.loads(r["record"]) for r in every]
    sequences = [s for record in held for s in record.get("samples", [record])]  # a line of n: its samples' tokens
    assert sum(r["tokens"] for r in every) == sum(len(s.get("tokens", ())) for s in sequences)


def test_generate_over_a_chain_column_of_strings_and_json_specs(
    over_a_dataset: tuple[list[dict[str, Any]], list[Any]],
) -> None:
    """A `chain` column mixing chain strings and JSON specs (lists) gives each row its chain's record."""
    records = [r for r in over_a_dataset[1] if r["line"] > N]
    chains = sorted((r["line"], json.loads(r["record"])["chain"]) for r in records)
    assert chains == sorted(2 * [(N + 1, "top_k(5) | sample"), (N + 2, "top_k(k=5) | sample")] + [(N + 3, CHAIN)])
    tokens = {json.dumps(json.loads(r["record"])["tokens"]) for r in records if r["line"] < N + 3}
    assert len(tokens) == 1  # the same chain, seed and prompt: the same tokens, whichever way it was written


def test_a_job_smaller_than_the_pool_warns_nothing(cluster: str) -> None:
    """One line on a pool of 2 actors: Ray Data warned that the pool "won't fully utilize the available
    concurrency" and to configure `override_num_blocks` (the command printed it as its own warning); the
    pool is now no bigger than the job's batches."""
    settings = BatchSettings(model=MODEL, chain="top_k(5) | sample", max_new_tokens=4, seed=5, cache="dense")
    ds = ray.data.from_items([{"line": 1, "prompt": "ROMEO: "}])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = decodekit_ray.generate(ds, settings, batch_size=8, actors=2).take_all()
    assert [r["line"] for r in records] == [1]
    assert [str(w.message) for w in caught] == []


def test_a_model_no_actor_can_load_is_one_line(cluster: str, tmp_path: Path) -> None:
    """The model loads where the command runs but not on the workers (a checkpoint or plugin only on the
    head node): the command printed Ray Data's 80-line traceback and "unexpected ActorDiedError"."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a"}\n{"prompt": "bc"}\n')
    out = tmp_path / "o.jsonl"
    args = ["generate", "--input", str(prompts), "--output", str(out), "-m", "batch-test-not-on-ray", "--seed", "0"]
    r = cli(*args, "--max-new-tokens", "3", "--ray", cluster, DECODEKIT_EXTRA_PLUGINS=PLUGINS)
    [node] = {n["NodeManagerAddress"] for n in ray.nodes()}
    assert (r.returncode, r.stderr) == (
        1,
        f"decodekit: error: --ray: an actor on node {node} cannot load the model: cannot load model "
        "'batch-test-not-on-ray': FileNotFoundError: no checkpoint on this node; every node needs the model and "
        "the plugins the job uses (docs/scale-out.md, 'What every node needs'); 0 records written "
        "(--resume continues)\n",
    )


def test_lines_failed_while_decoding_are_said_as_the_local_job_says_them(cluster: str, tmp_path: Path) -> None:
    """`--on-error fail`: the lines that failed while decoding are one error line each, in line order, on Ray as in
    one local process, byte for byte. They were said in the order their records came: on Ray the parts' (line 6
    before line 3), locally the decode's (under a window cache, by prompt length: line 2 before line 1)."""
    prompts = tmp_path / "p.jsonl"
    lines = [
        {"prompt": f"line {i}{'!' * (i % 3 == 0)}", **({"id": f"x{i}"} if i % 4 == 0 else {})} for i in range(1, 17)
    ]
    lines[0]["prompt"] = "a prompt longer than the others!"  # fails, and decodes after line 2 under a window
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = [*ARGS[: ARGS.index("--cache")], "--cache", "window(size=16)", "--batch-size", "4", "--on-error", "fail"]
    runs: list[tuple[int, str, str]] = []
    for where in ([], ["--ray", cluster, "--ray-actors", "2"]):
        out = tmp_path / f"out{len(runs)}.jsonl"
        r = cli("generate", "--input", str(prompts), "--output", str(out), *args, *where, **PLUGIN_ENV)
        runs.append((r.returncode, r.stderr.replace(str(out), "OUT"), out.read_text()))
    assert runs[0] == runs[1]
    failed = [line for line in runs[0][1].splitlines() if line.startswith("decodekit: error: line ")]
    said = "fail_on: a prompt holds token 2"
    assert failed == [
        f"decodekit: error: line {i} (id {i if i % 4 else repr(f'x{i}')}): NumericsError: {said}"
        for i in (1, 3, 6, 9, 12, 15)
    ], runs[0][1]


def test_a_join_without_the_token_is_refused_at_once(cluster: str, tmp_path: Path) -> None:
    """The test's cluster wants Ray's token authentication (ray.init's default); a command without RAY_AUTH_MODE
    was refused after Ray's 20 tries, a second apart (23 s in all); Ray's client says so on its first."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a"}\n')
    env = _env(**PLUGIN_ENV, RAY_AUTH_MODE="disabled")
    env.pop("RAY_AUTH_TOKEN", None)
    args = ["generate", "--input", str(prompts), "--output", str(tmp_path / "o.jsonl"), "-m", MODEL, "--ray", cluster]
    start = time.monotonic()
    job = _popen(args, env)
    _, err = job.communicate(timeout=120)
    took = time.monotonic() - start
    assert job.returncode == 2, err
    assert err.startswith(f"decodekit: error: --ray {cluster}: cannot join the Ray cluster there: it refused this "), (
        err
    )
    assert took < 15, took  # the command's own start, and one try: not 20 of them


@pytest.mark.parametrize("strategy", ["counted", "clashing"])
def test_a_plugin_strategys_own_fields_are_written_on_ray_as_here(cluster: str, tmp_path: Path, strategy: str) -> None:
    """A strategy's result fields of its own (tests/cli_strategy_plugin.py: `counted`'s `picks`, one per row;
    `clashing`'s, which the output cannot write and says so) reach the records on Ray as in one local process, byte
    for byte, with the same warnings. Before: neither job wrote them."""
    prompts = tmp_path / "p.jsonl"
    lines = [{"prompt": f"line {i}: " + "ab" * (i % 4), **({"n": 2} if i % 5 == 0 else {})} for i in range(1, 13)]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["-m", MODEL, "--seed", "5", "--max-new-tokens", "12", "--chain", "top_k(5) | temperature(1.5)"]
    args += ["--stop", "a", "--cache", "dense", "--batch-size", "4", "--strategy", strategy]
    runs: list[tuple[str, str]] = []
    for where in ([], ["--ray", cluster, "--ray-actors", "2"]):
        out = tmp_path / f"out{len(runs)}.jsonl"
        r = cli("generate", "--input", str(prompts), "--output", str(out), *args, *where, **STRATEGY_ENV)
        assert r.returncode == 0, r.stderr
        runs.append((r.stderr.replace(str(out), "OUT"), out.read_text()))
    assert runs[0] == runs[1]
    records = [json.loads(line) for line in runs[0][1].splitlines()]
    rows = [row for record in records for row in record.get("samples", [record])]
    assert len(rows) == len(lines) + 2
    if strategy == "clashing":
        assert runs[0][0].count("decodekit: warning: Clashing.") == 5  # seed, id, state, notes, acceptance_rate
        assert [row["prompt_length"] for row in rows] == [
            len(r["prompt"]) for r in records for _ in r.get("samples", [r])
        ]
    else:
        assert [row["picks"] for row in rows] == [len(row["tokens"]) for row in rows]


def test_a_speculative_jobs_closing_line_on_ray_gives_the_local_jobs_acceptance(cluster: str, tmp_path: Path) -> None:
    """The closing line's acceptance figures are the totals of the records the run wrote, on Ray as in one local
    process: the same line, the same records. Before: neither job's line had them."""
    prompts = tmp_path / "p.jsonl"
    lines = [{"prompt": f"ROMEO {i}:", **({"n": 2} if i % 3 == 0 else {})} for i in range(1, 7)]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["-m", "tiny-shakespeare", "--seed", "5", "--max-new-tokens", "12", "--chain", "temperature(1.2)"]
    args += ["--strategy", "speculative(draft='tiny-shakespeare-draft', k=3)", "--batch-size", "2"]
    runs: list[tuple[str, str]] = []
    for where in ([], ["--ray", cluster, "--ray-actors", "2"]):
        out = tmp_path / f"out{len(runs)}.jsonl"
        r = cli("generate", "--input", str(prompts), "--output", str(out), *args, *where)
        assert r.returncode == 0, r.stderr
        runs.append((r.stderr.replace(str(out), "OUT"), out.read_text()))
    assert runs[0] == runs[1]
    assert (
        runs[0][0].splitlines()[-1].startswith("6 results written to OUT · ")
        and "% of drafts accepted · " in runs[0][0]
    )


def test_prompt_token_ids_from_a_file_and_a_parquet_column_give_the_local_jobs_records(
    cluster: str, tmp_path: Path
) -> None:
    """Lines of token ids (`prompt_token_ids`) beside lines of text, read as a JSONL file and as Parquet columns
    (ids: a `list<int64>` column, null where a row gives text; a line's `stop`: `list<string>`): each row's record
    is the local job's."""
    lines: list[dict[str, Any]] = [
        {"prompt_token_ids": [53, 26, 22]},
        {"prompt": "ROMEO: ", "stop": ["e", "o"]},  # a list<string> column, null where a row has none
        {"prompt_token_ids": [51, 48], "n": 2, "prompt_logprobs": 1},
        {"prompt_token_ids": [96]},  # past cli-test-gpt's 96 ids: an error record
    ]
    source, out = tmp_path / "prompts.jsonl", tmp_path / "local.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    flags = ["-m", MODEL, "--chain", "top_k(5) | sample", "--max-new-tokens", "4", "--seed", "5", "--cache", "dense"]
    r = cli("generate", "--input", str(source), "--output", str(out), *flags, "--on-error", "skip")
    assert r.returncode == 0, r.stderr
    local = out.read_text().splitlines(keepends=True)
    assert json.loads(local[0])["prompt_token_ids"] == [53, 26, 22]
    columns = {key: [line.get(key) for line in lines] for key in ("prompt", "n", "prompt_logprobs", "stop")}
    ids = pa.array([line.get("prompt_token_ids") for line in lines], pa.list_(pa.int64()))
    pq.write_table(pa.table({"line": [1, 2, 3, 4], **columns, "prompt_token_ids": ids}), tmp_path / "p.parquet")
    parquet = decodekit_ray.from_fields(ray.data.read_parquet(str(tmp_path / "p.parquet")))
    settings = BatchSettings(model=MODEL, chain="top_k(5) | sample", max_new_tokens=4, seed=5, cache="dense")
    rows = parquet.union(decodekit_ray.read_prompt_lines(source))  # one actor pool for both
    records = decodekit_ray.generate_lines(rows, settings, batch_size=4, actors=1).take_all()
    assert sorted((row["line"], row["record"]) for row in records) == sorted(2 * list(enumerate(local, 1)))

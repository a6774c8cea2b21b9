"""Edges of the `decodekit` command line a new user runs into: Ctrl-C before generation starts,
numbers out of range, empty prompts.

The commands run in this process (`cli_runner.run_cli`, as in `tests/test_cli.py`) on
`cli-test-gpt`, the tiny model `tests/cli_testplugin.py` registers.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cli_testplugin
import pytest
from cli_runner import run_cli

MODEL = cli_testplugin.MODEL_NAME


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DECODEKIT_EXTRA_PLUGINS"] = "cli_testplugin"
    env.pop("DECODEKIT_LOAD_PLUGINS", None)
    env.update(extra)
    return env


def _generate(*extra: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    args = ["generate", "ROMEO: ", "-m", MODEL, "--max-new-tokens", "3", "--seed", "0", *extra]
    result: subprocess.CompletedProcess[str] = run_cli(args, _env(), stdin=stdin, fresh_plugins=True)
    return result


def _ctrl_c(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


def test_ctrl_c_while_the_model_loads_says_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    # typer turns a KeyboardInterrupt into a silent exit status 130: the user saw nothing.
    monkeypatch.setattr("decodekit_cli.sampling_options.load_named_model", _ctrl_c)
    result = _generate()
    assert (result.returncode, result.stderr, result.stdout) == (130, "decodekit: error: interrupted\n", "")


def test_ctrl_c_while_a_plugin_imports_is_not_a_plugin_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The registry reports Ctrl-C during a plugin's import as that plugin's PluginError (status 2).
    monkeypatch.setattr("decodekit.registry.import_object", _ctrl_c)
    result = _generate()
    assert (result.returncode, result.stderr) == (130, "decodekit: error: interrupted\n")


def test_ctrl_c_while_the_command_line_imports_is_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from decodekit_cli import main

    monkeypatch.setattr("decodekit_cli.app.run", _ctrl_c)
    try:
        status = main(["generate", "ROMEO:"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main(): Python prints a traceback")
    assert status == 130


def test_more_samples_than_memory_holds_is_an_error_naming_num_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """-n 100000000 hung building its samples and -n 10**20 was 'unexpected OverflowError': the rows are sized
    first. A sample's row takes at least 2048 + 16·(7 + 3) + 8·96 = 2976 bytes (prompt, new tokens, vocabulary)."""
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**30)
    result = _generate("-n", str(10**20))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "decodekit: error: generate: --num-samples=100000000000000000000 is invalid: its "
        "100,000,000,000,000,000,000 rows of 10 tokens would take at least 277,161,598,205,566.4 GiB, more than "
        "the 1.0 GiB of memory of device cpu; allowed: --num-samples <= 360,800 here\n"
    )
    monkeypatch.setattr("decodekit.engine.device_memory", lambda device: 2**20)
    assert _generate("-n", "353").stderr.endswith("allowed: --num-samples <= 352 here\n")
    assert _generate("-n", "352").returncode == 0


def test_threads_beyond_the_cpus_is_an_error_not_a_crash() -> None:
    # torch.set_num_threads(100000) crashes the process (a segfault, or libgomp's abort); the tests
    # ask for one more than the CPUs, which torch would accept, so the check is what fails.
    from decodekit.threads import usable_cpus

    cpus = usable_cpus()
    result = _generate("--threads", str(cpus + 1))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"decodekit: error: --threads {cpus + 1}: more than the {cpus} CPUs this process can use; "
        f"allowed: 1 <= N <= {cpus}\n"
    )
    assert _generate("--threads", str(cpus)).returncode == 0


COMPILE_FAILED = (
    "decodekit: error: --compile: torch.compile failed on the model's forward: InvalidCxxCompiler: No working C++ "
    "compiler found in torch._inductor.config.cpp.cxx: (None, 'g++'); run without --compile (the same output)"
)


def _compile_without_a_cxx(fn: Any, **options: Any) -> Any:
    """A `torch.compile` whose function fails on its first call as inductor does without a C++ compiler (torch 2.6
    has no InductorError: its tests are compiling ones, skipped on a torch that refuses --compile)."""
    from torch._inductor.exc import InductorError, InvalidCxxCompiler

    def run(*args: Any, **kwargs: Any) -> Any:
        raise InductorError(InvalidCxxCompiler(), None)

    return run


@pytest.fixture
def own_chains() -> Iterator[None]:
    """Chains parsed anew, and forgotten after: a batch job keeps each chain it parses, and a chain its
    compiled step (here a stand-in's), which a later `--compile` in this process would run."""
    from decodekit_cli.batch_settings import parsed_chain_cache

    parsed_chain_cache.cache_clear()
    yield
    parsed_chain_cache.cache_clear()


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch refuses --compile)
def test_a_compiler_failure_is_one_line_naming_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("torch.compile", _compile_without_a_cxx)
    result = _generate("--compile")
    assert (result.returncode, result.stderr) == (1, COMPILE_FAILED + "\n")


@pytest.mark.xdist_group("compile")  # with the compiling tests (skipped where torch refuses --compile)
def test_a_compiler_failure_stops_a_batch_job_and_resume_without_compile_continues(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, own_chains: None
) -> None:
    """Not an error record per line (each line decoded again alone, compiling again): the job stops."""
    prompts, out = tmp_path / "p.jsonl", tmp_path / "o.jsonl"
    prompts.write_text('{"prompt": "a"}\n{"prompt": "bc"}\n')
    args = ["generate", "--input", str(prompts), "--output", str(out), "-m", MODEL, "--max-new-tokens", "3"]
    args += ["--seed", "0", "--on-error", "skip"]
    monkeypatch.setattr("torch.compile", _compile_without_a_cxx)
    result = run_cli([*args, "--compile"], _env(), fresh_plugins=True)
    assert (result.returncode, result.stderr) == (1, f"{COMPILE_FAILED}; 0 records written (--resume continues)\n")
    assert out.read_text() == ""
    resumed = run_cli([*args, "--resume"], _env(), fresh_plugins=True)
    assert resumed.returncode == 0, resumed.stderr
    assert [json.loads(line)["line"] for line in out.read_text().splitlines()] == [1, 2]


def test_new_plugin_refuses_a_python_keyword(tmp_path: Path) -> None:
    # `import` passed the name check, and the tests it wrote (`from decodekit_import.import import
    # Import`) were a SyntaxError: not "passes pytest as written".
    result = run_cli(["new-plugin", "import", "--dir", str(tmp_path / "out")], _env())
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert (
        result.stderr
        == "decodekit: error: new-plugin: NAME 'import' is a Python keyword; allowed: a name that is not one\n"
    )


def test_new_plugin_a_folder_that_cannot_be_made_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "softcap"  # under a file: mkdir fails with NotADirectoryError
    result = run_cli(["new-plugin", "softcap", "--dir", str(target)], _env())
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"decodekit: error: new-plugin: cannot write '{target}")
    assert result.stderr.endswith(": Not a directory; allowed: a folder that can be created and written (--dir)\n")


@pytest.mark.parametrize("command", ["generate", "explain"])
def test_an_empty_prompt_is_an_error_naming_prompt(command: str) -> None:
    # The library's own error, "prompts: row 0 is empty", names no option of the command.
    result = run_cli([command, "", "-m", MODEL, "--seed", "0"], _env())
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "decodekit: error: PROMPT '' is empty (no tokens); allowed: text of at least one token\n"


@pytest.mark.parametrize("stdin", ["", "\n"])
def test_an_empty_stdin_prompt_is_an_error_naming_it(stdin: str) -> None:
    result = run_cli(["generate", "-", "-m", MODEL, "--seed", "0"], _env(), stdin=stdin)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "decodekit: error: PROMPT '-': stdin holds no text (one trailing newline is dropped); "
        "allowed: text of at least one token\n"
    )


def test_batch_summary_counts_one_result_in_the_singular(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text('{"prompt": "ROMEO: "}\n{"prompt": "ROMEO: ", "seed": -1}\n')
    args = ["generate", "--input", "in.jsonl", "--output", "out.jsonl", "-m", MODEL, "--max-new-tokens", "2"]
    result = run_cli([*args, "--on-error", "skip"], _env(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "1 result and 1 error record written to out.jsonl"


def test_a_group_without_its_command_says_what_is_missing() -> None:
    # It printed its help, then "decodekit: error: (see 'decodekit cache --help')": an empty error.
    result = run_cli(["cache"], _env())
    assert result.returncode == 2 and "Usage: decodekit cache" in result.stdout
    assert result.stderr == "decodekit: error: 'decodekit cache' needs a command; allowed: calibrate\n"


@pytest.mark.parametrize("strategy", ["sample", "beam(num_beams=2)"])
def test_zero_new_tokens_end_with_length_not_as_if_interrupted(strategy: str) -> None:
    # No token event came, so the samples kept finish_reason null: what the docs say of Ctrl-C.
    result = _generate("--max-new-tokens", "0", "--json", "-n", "2", "--strategy", strategy)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["interrupted"] is False
    count = 2 if strategy == "sample" else 1  # -n 2 under beam: its 2 best beams; a search of no steps has one
    assert [(s["tokens"], s["finish_reason"]) for s in doc["samples"]] == [([], "length")] * count
    shown = _generate("--max-new-tokens", "0", "-n", "2", "--strategy", strategy)
    assert shown.stdout.count("--- sample") == (count if count > 1 else 0), shown.stdout  # one sample: no header


def _limit_file_size() -> None:
    # Files this process writes stop growing at 2 KiB (EFBIG; Python ignores SIGXFSZ): a disk that fills up.
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_an_output_that_cannot_take_a_record_is_an_error_naming_it(tmp_path: Path) -> None:
    # It was "unexpected OSError: [Errno 27] File too large": neither --output nor --resume named.
    # A process of its own: the file-size limit is one the whole process would share.
    (tmp_path / "in.jsonl").write_text('{"prompt": "ROMEO: "}\n' * 20)
    args = ["generate", "--input", "in.jsonl", "--output", "out.jsonl", "-m", MODEL, "--max-new-tokens", "3"]
    env = _env(PYTHONPATH=os.pathsep.join([str(Path(cli_testplugin.__file__).parent), *sys.path]))
    full = subprocess.run(
        [sys.executable, "-m", "decodekit_cli", *args, "--seed", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, preexec_fn=_limit_file_size, timeout=120,
    )  # fmt: skip
    assert full.returncode == 1 and "Traceback" not in full.stderr
    [line] = full.stderr.splitlines()
    assert line.startswith("decodekit: error: --output 'out.jsonl': cannot write a record: File too large; ")
    assert line.endswith(" records written (--resume continues)")
    resumed = run_cli([*args, "--seed", "0", "--resume"], _env(), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert [json.loads(r)["line"] for r in (tmp_path / "out.jsonl").read_text().splitlines()] == list(range(1, 21))


def test_samplers_lists_a_name_given_twice_once() -> None:
    result = run_cli(["samplers", "--json", "top_k", "sample", "top_k"], _env())
    assert result.returncode == 0, result.stderr
    assert [s["name"] for s in json.loads(result.stdout)["samplers"]] == ["top_k", "sample"]


@pytest.mark.parametrize(("command", "length"), [("explain", "--steps"), ("generate", "--max-new-tokens")])
def test_past_the_context_the_advice_is_in_flags(command: str, length: str) -> None:
    # generate added "(on the command line: --cache none)" to the library's cache='none'; explain did not. Both
    # then advised the Python spelling cache='window(size=...)' beside the flag.
    result = run_cli([command, "ROMEO: ", "-m", "tiny-shakespeare", length, "100000", "--cache", "dense"], _env())
    assert result.returncode == 2 and "Traceback" not in result.stderr  # rotary: an evicting cache is advised
    assert "a cache that evicts (--cache 'window(size=" in result.stderr and "cache='" not in result.stderr
    assert result.stderr.endswith("or --cache none, which crops the context\n")


@pytest.mark.parametrize(("command", "option"), [("explain", "--steps"), ("generate", "--max-new-tokens")])
def test_past_the_context_names_the_length_option_the_command_has(command: str, option: str) -> None:
    # explain said "lower max_new_tokens": it has no such option, its length is --steps.
    result = run_cli([command, "ROMEO: ", "-m", MODEL, option, "100000"], _env())
    assert result.returncode == 2 and "max_new_tokens" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"decodekit: error: prompt of 7 tokens + {option} 100000 = 100007 tokens exceeds ")
    assert (
        f"shorten the prompt, lower {option} to 121 or fewer (the context less the prompt's 7 tokens), or --cache "
        "none" in result.stderr
    )  # the context of 128 less the 7 tokens: said, not left to work out


def test_output_dash_is_refused_not_a_file_named_dash(tmp_path: Path) -> None:
    # `--output -` wrote the records to a file named "-" (and "-.settings.json") and said "written to -".
    (tmp_path / "in.jsonl").write_text('{"prompt": "ROMEO: "}\n')
    args = ["generate", "--input", "in.jsonl", "--output", "-", "-m", MODEL, "--max-new-tokens", "2"]
    result = run_cli(args, _env(), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "decodekit: error: --output '-': records are written to a file, not to stdout (--resume and the "
        "settings recorded beside it need one); allowed: a file path, e.g. 'results.jsonl'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_explain_dash_reads_the_prompt_from_stdin_as_generate_does() -> None:
    # explain took "-" as the prompt itself, where generate reads stdin.
    args = ["-m", MODEL, "--steps", "2", "--seed", "0", "--json"]
    piped = run_cli(["explain", "-", *args], _env(), stdin="ROMEO: \n")
    given = run_cli(["explain", "ROMEO: ", *args], _env())
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["prompt"] == "ROMEO: "
    assert piped.stdout == given.stdout


@pytest.mark.parametrize("command", ["generate", "explain"])
def test_a_stdin_prompt_with_windows_line_ends_reads_them_as_newlines(command: str) -> None:
    # "ROMEO:\r\nJULIET:\r\n" kept every "\r": a character the tokenizer lacks (an error), or one the model saw.
    args = [command, "-m", MODEL, "--seed", "0", "--json", *(["--steps", "2"] if command == "explain" else [])]
    piped = run_cli([args[0], "-", *args[1:]], _env(), stdin="ROMEO:\r\nJULIET:\r\n")
    given = run_cli([args[0], "ROMEO:\nJULIET:", *args[1:]], _env())
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["prompt"] == "ROMEO:\nJULIET:"
    assert _without_timings(piped.stdout) == _without_timings(given.stdout)


def _without_timings(document: str) -> Any:
    data = json.loads(document)
    for key in ("tokens_per_second", "seconds"):
        data.pop(key, None)
    for sample in data.get("samples", []):
        sample.pop("tokens_per_second", None)
    return data


@pytest.mark.parametrize("command", [["plugins"], ["generate", "ROMEO: ", "-m", MODEL, "--max-new-tokens", "2"]])
def test_load_plugins_naming_no_installed_distribution_is_an_error(command: list[str]) -> None:
    # It was accepted silently: `plugins` listed the core alone, `generate` said the chain was not installed.
    result = run_cli(command, _env(DECODEKIT_LOAD_PLUGINS="nonexist"))
    assert (result.returncode, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "decodekit: error: DECODEKIT_LOAD_PLUGINS names 'nonexist', which is no installed plugin distribution; "
        "allowed: a comma-separated list of decodekit, decodekit-adaptive, "
    ), line


@pytest.mark.parametrize(
    "args",
    [
        ["generate", "ROMEO: ", "-m", MODEL, "--max-new-tokens", "3", "--seed", "0"],
        ["generate", "ROMEO: ", "-m", MODEL, "--max-new-tokens", "3", "--seed", "0", "--json"],
        ["samplers"],
        ["generate", "--help"],  # typer's help: rich exited with SystemExit(1) on its own
    ],
)
def test_a_closed_pipe_ends_the_command_quietly_with_status_141(args: list[str]) -> None:
    # `decodekit ... | head -c 10`: click turned the EPIPE into a silent exit status 1, a failure like any other.
    # A process of its own, its stdout a pipe whose reader is gone before it writes (as after `head` exits).
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = _env(PYTHONPATH=os.pathsep.join([str(Path(cli_testplugin.__file__).parent), *sys.path]))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "decodekit_cli", *args],
            stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE, env=env, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


def test_chain_takes_a_json_spec_as_chain_from_spec_does() -> None:
    # --chain '[{"name": "top_k", ...}]' was read as a chain string: "expected a sampler name" at position 0.
    spec = '[{"name": "top_k", "params": {"k": 3}}, {"name": "temperature", "params": {"value": 0.7}}]'
    from_json = _generate("--chain", spec, "--json")
    from_text = _generate("--chain", "top_k(3) | temperature(0.7)", "--json")
    assert from_json.returncode == 0, from_json.stderr
    assert json.loads(from_json.stdout)["chain"] == "top_k(k=3) | temperature(value=0.7) | sample"
    assert _without_timings(from_json.stdout) == _without_timings(from_text.stdout)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ('[{"name": ', "chain spec: not valid JSON: Expecting value: line 1 column 11 (char 10)"),
        ('{"name": "top_k"}', "chain spec: {'name': 'top_k'}; allowed: a list of stage objects"),
    ],
)
def test_a_bad_json_chain_spec_is_an_error_naming_chain(spec: str, message: str) -> None:
    result = _generate("--chain", spec)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"decodekit: error: --chain {spec!r}: {message}\n"


class _TerminalStdin(io.StringIO):
    """Typed text on a terminal: `isatty()` is what makes a prompt from stdin say how to end it."""

    def isatty(self) -> bool:
        return True


def test_a_prompt_from_a_terminal_says_how_to_end_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`decodekit generate -` on a terminal waited silently for the prompt: a one-line hint on stderr, then it reads."""
    from decodekit_cli.options import prompt_text

    monkeypatch.setattr("sys.stdin", _TerminalStdin("ROMEO:\n"))
    assert prompt_text("-") == "ROMEO:"
    assert capsys.readouterr() == ("", "reading the prompt from standard input; end it with Ctrl-D\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("ROMEO:\n"))  # piped: nothing said
    assert prompt_text("-") == "ROMEO:"
    assert capsys.readouterr() == ("", "")


def test_plugins_lists_an_installed_plugin_without_an_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin whose pyproject.toml lacks [project.entry-points.decodekit] was in no table: nothing found it."""
    from decodekit_cli import main

    import decodekit as dk

    info = tmp_path / "decodekit_noentry-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: decodekit-noentry\nVersion: 0.1.0\nRequires-Dist: decodekit\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    try:
        dk.reload_plugins()
        assert main(["plugins"]) == 0
        assert main(["plugins", "--json"]) == 0
    finally:
        monkeypatch.undo()
        dk.reload_plugins()
    table, listed = capsys.readouterr().out.split("\n{", 1)
    assert "Installed without an entry point" in table
    assert "decodekit-noentry │ requires decodekit and declares no entry point" in table
    assert json.loads("{" + listed)["no_entry_point"] == [
        {
            "distribution": "decodekit-noentry",
            "error": "requires decodekit and declares no entry point: a plugin's pyproject.toml needs "
            "[project.entry-points.decodekit], then pip install it again",
        }
    ]


@pytest.mark.parametrize("k", ["0", "-1"])
def test_top_k_off_as_vllm_and_llama_cpp_spell_it_is_told_how_here(k: str) -> None:
    # vLLM's top_k=-1 and llama.cpp's --top-k 0 turn it off; here the error named the stage's k and said nothing of it.
    for command in (["generate", "ROMEO: "], ["explain", "ROMEO: "]):
        result = run_cli([*command, "-m", MODEL, "--top-k", k], _env())
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith(f"decodekit: error: --top-k {k}: ") and "leave --top-k out" in result.stderr

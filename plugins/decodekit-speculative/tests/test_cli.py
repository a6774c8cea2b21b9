"""`decodekit generate --strategy "speculative(...)"`: the acceptance rate and mean acceptance length on the status
line and in JSON, and each row's counts (`drafted`, `accepted`, `draft_rounds`, `accepted_by_position`) in `--json`'s
samples and a batch job's records."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from decodekit_cli import main
from decodekit_cli.acceptance import Acceptance
from decodekit_cli.generate_command import _status_line
from decodekit_speculative.acceptance import COUNTS

from decodekit.context import row_seeds


def test_status_line_shows_acceptance() -> None:
    line = _status_line(40, 2.0, 1, Acceptance(0.8125, 3.4375))
    assert line.endswith("20.0 tokens/s · 81% of drafts accepted · 3.44 tokens per round")
    assert "accepted" not in _status_line(40, 2.0, 1)
    assert _status_line(1, 2.0, 1, Acceptance(None, None)).endswith(" · nothing drafted")  # not "0% accepted"


def test_generate_json_reports_null_when_nothing_was_drafted(capsys: pytest.CaptureFixture[str]) -> None:
    """One new token: no round drafts. Before: `"acceptance_rate": 0.0`, as if every draft had been rejected."""
    strategy = "speculative(draft='tiny-shakespeare-draft', k=3)"
    command = ["generate", "ROMEO:", "--strategy", strategy, "--max-new-tokens", "1", "--json"]
    status = main(command)
    out = capsys.readouterr()
    assert status == 0, out.err
    document = json.loads(out.out)
    assert (document["acceptance_rate"], document["mean_acceptance_length"]) == (None, None)
    [sample] = document["samples"]
    assert [sample[name] for name in COUNTS] == [0, 0, 0, [0, 0, 0]]


def test_generate_json_reports_acceptance(capsys: pytest.CaptureFixture[str]) -> None:
    strategy = "speculative(draft='tiny-shakespeare-draft', k=3)"
    command = ["generate", "ROMEO:", "--strategy", strategy, "--chain", "greedy", "--max-new-tokens", "30", "--json"]
    status = main(command)  # in this process: a new one would cost seconds and test nothing more
    out = capsys.readouterr()
    assert status == 0, out.err
    document = json.loads(out.out)
    assert 0.0 < document["acceptance_rate"] <= 1.0 and 1.0 <= document["mean_acceptance_length"] <= 4.0
    assert document["strategy"].startswith("speculative")


def test_draft_none_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`--strategy "speculative(draft=None)"` once ran prompt lookup silently; no draft at all is prompt lookup."""
    from decodekit_cli import main

    assert main(["generate", "ROMEO:", "--strategy", "speculative(draft=None)", "--max-new-tokens", "4"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == "decodekit: error: strategy speculative: draft=null is invalid; allowed: a string or a Model"


def test_a_registered_draft_whose_forward_takes_only_input_ids_is_one_line(
    capsys: pytest.CaptureFixture[str], ids_only: Callable[[int], torch.nn.Module]
) -> None:
    """Before: "unexpected TypeError: OnlyIds.forward() takes 2 positional arguments but 4 were given"."""
    import decodekit as dk

    vocab_size = dk.load_model("tiny-shakespeare").spec.vocab_size

    class Plugin:
        @dk.hookimpl
        def register_models(self, register: Any) -> None:
            register("ids-only", lambda argument, params: ids_only(vocab_size))

    plugin = Plugin()
    dk.register_plugin(plugin, name="ids-only-plugin")
    try:
        strategy = "speculative(draft='ids-only')"
        assert main(["generate", "ROMEO:", "--strategy", strategy, "--max-new-tokens", "4"]) == 2
    finally:
        dk.unregister_plugin(plugin)
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "decodekit: error: speculative: draft='ids-only': its forward takes (input_ids), but decodekit calls it as "
    )


SPECULATIVE = "speculative(draft='tiny-shakespeare-draft', k=3)"
CHAIN = "temperature(1.2)"  # sampled: the draft is both accepted and rejected


def _decoded(prompts: list[str], seed: int | list[int], max_new_tokens: int) -> Any:
    """`dk.decode` of what the command runs: the speculative result whose drafted / accepted it must show."""
    import decodekit as dk

    model = dk.load_model("tiny-shakespeare")
    return dk.decode(
        model, prompts, strategy=SPECULATIVE, chain=CHAIN, max_new_tokens=max_new_tokens, seed=seed, cache="dense"
    )


def test_generate_json_reports_each_samples_drafted_and_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: only the whole run's `acceptance_rate`, not each row's counts."""
    command = ["generate", "ROMEO:", "--strategy", SPECULATIVE, "--chain", CHAIN, "--max-new-tokens", "30"]
    status = main([*command, "-n", "3", "--seed", "7", "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    document = json.loads(out.out)
    expected = _decoded(["ROMEO:"] * 3, row_seeds(7, 1, 3) or [], 30)  # -n 3 --seed 7: one prompt's copies
    assert [s["tokens"] for s in document["samples"]] == expected.tokens
    assert [[s[name] for name in COUNTS] for s in document["samples"]] == list(
        map(list, zip(*(getattr(expected, name) for name in COUNTS)))
    )
    assert document["acceptance_rate"] == round(sum(expected.accepted) / sum(expected.drafted), 4)
    assert document["mean_acceptance_length"] == round(1 + sum(expected.accepted) / sum(expected.draft_rounds), 4)
    assert 0 < sum(expected.accepted) < sum(expected.drafted)


def test_batch_records_carry_each_lines_drafted_and_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a batch job's records held neither."""
    prompts, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"prompt": "ROMEO:"}, {"prompt": "JULIET:", "max_new_tokens": 12}, {"prompt": "KING:", "n": 2}]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["--strategy", SPECULATIVE, "--chain", CHAIN, "--max-new-tokens", "20", "--seed", "3"]
    status = main(["generate", "--input", str(prompts), "--output", str(out), *args])
    assert status == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for record in records:
        rows = record.get("samples", [record])
        seeds = [s["seed"] for s in rows] if "samples" in record else [record["seed"]]
        expected = _decoded([record["prompt"]] * len(rows), seeds, record["max_new_tokens"])
        assert [s["tokens"] for s in rows] == expected.tokens
        assert [[s[name] for name in COUNTS] for s in rows] == list(
            map(list, zip(*(getattr(expected, name) for name in COUNTS)))
        )


def test_an_output_written_before_drafted_and_accepted_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output whose records an older decodekit wrote without the strategy's fields resumes: its records stay as
    they are, the lines it lacks get theirs, each as an uninterrupted run writes it."""
    prompts, whole, old = tmp_path / "in.jsonl", tmp_path / "whole.jsonl", tmp_path / "old.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("ROMEO:", "JULIET:", "KING:")))
    args = [
        "--strategy",
        SPECULATIVE,
        "--chain",
        CHAIN,
        "--max-new-tokens",
        "10",
        "--seed",
        "3",
        "--input",
        str(prompts),
    ]
    assert main(["generate", *args, "--output", str(whole)]) == 0, capsys.readouterr().err
    records = whole.read_text().splitlines(keepends=True)
    first = json.loads(records[0])
    before = {key: value for key, value in first.items() if key not in COUNTS}
    assert len(before) == len(first) - len(COUNTS)
    old.write_text(json.dumps(before) + "\n")
    (tmp_path / "old.jsonl.settings.json").write_text((tmp_path / "whole.jsonl.settings.json").read_text())
    capsys.readouterr()
    assert main(["generate", *args, "--output", str(old), "--resume"]) == 0
    said = capsys.readouterr().err.splitlines()[-1]  # the acceptance of the records this run wrote
    assert said.startswith(f"2 results written to {old}, 1 already there · ") and said.endswith(" tokens per round")
    assert old.read_text().splitlines(keepends=True) == [json.dumps(before) + "\n", *records[1:]]


def test_a_batch_jobs_closing_line_gives_its_acceptance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The closing line of a speculative batch job ends as `generate`'s status line does, with the job's acceptance:
    accepted / drafted tokens and 1 + accepted / draft rounds over every sample of the records it wrote (a line of
    two samples counts both); a job of another strategy says nothing of drafts. Before: neither figure."""
    prompts, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [{"prompt": "ROMEO:"}, {"prompt": "JULIET:", "max_new_tokens": 12}, {"prompt": "KING:", "n": 2}]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["--input", str(prompts), "--chain", CHAIN, "--max-new-tokens", "20", "--seed", "3"]
    assert main(["generate", *args, "--output", str(out), "--strategy", SPECULATIVE]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    rows = [row for record in records for row in record.get("samples", [record])]
    drafted, accepted, rounds = (sum(row[name] for row in rows) for name in ("drafted", "accepted", "draft_rounds"))
    assert len(rows) == 4 and 0 < accepted < drafted
    figures = f"{accepted / drafted:.0%} of drafts accepted · {1 + accepted / rounds:.2f} tokens per round"
    assert capsys.readouterr().err.splitlines()[-1] == f"3 results written to {out} · {figures}"
    assert main(["generate", *args, "--output", str(tmp_path / "sampled.jsonl")]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == f"3 results written to {tmp_path / 'sampled.jsonl'}"

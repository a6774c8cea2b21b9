"""Ray's notes on a job (an actor killed mid-run: "(raylet) A worker died ...") stay off the command's stdout; the
first death is one warning.

Ray's driver printed them there, coloured, where a batch job writes nothing else (three lines for one killed actor,
measured), while the job recovered and wrote every record once. Here Ray's own printer is called as its error
listener calls it, in this process."""

from __future__ import annotations

import warnings

import pytest
from decodekit_ray.ray_output import DIED, without_raylet_notes
from ray._private.worker import print_to_stdstream

NOTES = [
    "Task MapWorker(MapBatches(LineDecoder)).submit failed. There are infinite retries remaining, so the task will be "
    "retried. Error: The actor is temporarily unavailable",
    "A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, "
    "check the logs for the dead worker.",
]


def test_rays_notes_stay_off_stdout_and_the_first_death_is_one_warning(capsys: pytest.CaptureFixture[str]) -> None:
    print_to_stdstream({"lines": NOTES[:1], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    assert "infinite retries" in capsys.readouterr().out  # what Ray does by itself
    with warnings.catch_warnings(record=True) as said, without_raylet_notes():
        warnings.simplefilter("always")
        print_to_stdstream({"lines": NOTES, "pid": "raylet", "is_err": False}, ignore_prefix=False)
        print("a line of the job's own", flush=True)
        print_to_stdstream({"lines": NOTES[1:], "pid": "raylet", "is_err": False}, ignore_prefix=False)  # a second
    captured = capsys.readouterr()
    assert captured.out == "a line of the job's own\n"
    assert captured.err == ""
    assert [str(w.message) for w in said] == [DIED]  # once: an actor that dies on every try would repeat it

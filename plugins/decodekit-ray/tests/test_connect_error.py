"""`--ray auto` (or an address) where no cluster runs: the error says what to give instead.

It passed on Ray's own advice, "setting `--address` flag or `RAY_ADDRESS`", a flag decodekit does not have, and
named no way to run the job: start a cluster, or `--ray` alone. Ray's `init` is replaced here, so no cluster is
looked for or started (one that another user runs on this machine would be joined)."""

from __future__ import annotations

import pytest
import ray
from decodekit_cli.errors import CliError
from decodekit_ray import cluster

RAY_SAYS = "Please specify the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable."


def test_no_cluster_to_join_names_what_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_cluster(**_: object) -> None:
        raise ConnectionError(f"Could not find any running Ray instance. {RAY_SAYS}")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    with pytest.raises(CliError) as caught:
        cluster.connect("auto")
    message = str(caught.value)
    assert message.startswith(
        "--ray auto: cannot join the Ray cluster there: Could not find any running Ray instance; allowed: a running "
        "cluster's address (`ray start --head` starts one here, which --ray auto joins), or --ray alone, which starts "
        "Ray for this job; "
    )
    assert "--address" not in message

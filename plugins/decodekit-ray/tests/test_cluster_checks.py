"""What `--ray` says, at once and in one line, where Ray would wait or talk: no cluster at the address, an address Ray
cannot use, an actor size no node has, Ray's own log lines while it tries to join. Ray's `init` and `nodes` are
replaced here, so no cluster is joined or started."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import ray
from decodekit_cli.errors import CliError
from decodekit_ray import cluster
from ray.exceptions import AuthenticationError

from decodekit.errors import ParameterError

RAY_LOG = b"[2026-12-05 02:59:03,713 W 31607 31607] gcs_client.cc:210: Failed to get cluster ID from GCS server\n"


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """ray.init records its calls and fails as it does where nothing answers."""
    calls: list[dict[str, object]] = []

    def init(**kwargs: object) -> None:
        calls.append(kwargs)
        raise ConnectionError("Failed to connect to Ray cluster")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    return calls


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on leaving: nothing listens there


def test_an_address_where_nothing_listens_is_refused_before_ray_tries(no_ray: list[dict[str, object]]) -> None:
    # Ray tried such an address for minutes (over 2 measured), a log line every few seconds.
    port = _closed_port()
    with pytest.raises(CliError) as caught:
        cluster.connect(f"127.0.0.1:{port}")
    assert not no_ray
    assert str(caught.value).startswith(f"--ray 127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port} (")
    assert "allowed: the address `ray start --head` printed" in str(caught.value)


def test_rays_own_address_variable_is_named_as_the_address(
    no_ray: list[dict[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--ray` alone joins $RAY_ADDRESS: the error said "--ray local", a value the user never wrote.
    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(CliError) as caught:
        cluster.connect(cluster.LOCAL)
    assert str(caught.value).startswith(f"--ray (RAY_ADDRESS=127.0.0.1:{port}): no Ray cluster answers at ")
    assert "or --ray alone with RAY_ADDRESS unset, which starts Ray for this job" in str(caught.value)


def test_rays_log_lines_while_joining_are_not_shown(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A cluster with token authentication joined without a token: 20 such lines, one a second, then the error.
    def init(**_: object) -> None:
        os.write(2, RAY_LOG * 3 + b"a line of someone else\n")
        raise ConnectionError("Failed to connect to Ray cluster")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(cluster, "_check_listening", lambda address, joined: None, raising=False)
    with pytest.raises(CliError):
        cluster.connect("10.0.0.7:6379")
    assert capfd.readouterr().err == "a line of someone else\n"


def test_a_cluster_refusing_the_token_is_refused_before_ray_tries(
    no_ray: list[dict[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ray.init tried 20 times, a second apart, and then said only "Failed to connect to Ray cluster at ..."; its
    # client says on the first try that the cluster refused the token.
    def refused(address: str) -> None:
        raise AuthenticationError(
            f"RPC error: InvalidAuthToken: Authentication token is missing or incorrect ({address})"
        )

    monkeypatch.setattr(ray._raylet, "GcsClient", refused)
    monkeypatch.setattr(cluster, "_check_listening", lambda address, joined: None)
    with pytest.raises(CliError) as caught:
        cluster.connect("10.0.0.7:6379")
    assert not no_ray
    assert str(caught.value).startswith(
        "--ray 10.0.0.7:6379: cannot join the Ray cluster there: it refused this process's authentication token "
        "(missing or incorrect); allowed: "
    )


def test_a_cluster_that_takes_the_token_is_joined(
    no_ray: list[dict[str, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray._raylet, "GcsClient", lambda address: None)
    monkeypatch.setattr(cluster, "_check_listening", lambda address, joined: None)
    with pytest.raises(CliError, match="Failed to connect to Ray cluster"):  # no_ray's init: it was tried
        cluster.connect("10.0.0.7:6379")
    assert len(no_ray) == 1


def test_an_address_ray_rejects_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # ray:// without Ray Client installed: it was "unexpected ValueError".
    def init(**_: object) -> None:
        raise ValueError("Ray Client requires pip package `ray[client]`.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(CliError, match=r"^--ray ray://10.0.0.7:10001: Ray Client requires pip package `ray\[client\]`"):
        cluster.connect("ray://10.0.0.7:10001")


NODES = [
    {"Alive": True, "Resources": {"CPU": 2.0, "memory": 1e9}},
    {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 1.0}},  # a node lost: it holds no actor
]


@pytest.mark.parametrize(("actors", "cpus", "gpus"), [(None, 1.0, 1.0), (2, 1.0, 1.0), (1, 4.0, 0.0)])
def test_an_actor_no_node_can_hold_is_refused(
    monkeypatch: pytest.MonkeyPatch, actors: int | None, cpus: float, gpus: float
) -> None:
    # The job waited for such actors forever, saying nothing (--ray-actor-gpus 1 on a cluster without GPUs).
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    with pytest.raises(ParameterError) as caught:
        cluster.actor_count(actors, cpus, gpus)
    assert str(caught.value) == (
        f"actor_cpus={cpus:g}, actor_gpus={gpus:g} (--ray-actor-cpus, --ray-actor-gpus): no node of the Ray cluster "
        "has that much, so no actor could start (its nodes: 2 CPUs and 0 GPUs); allowed: at most one node's CPUs and "
        "GPUs, or add a node that has them to the cluster first"
    )


def test_an_actor_one_node_holds_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    assert cluster.actor_count(None, 1.0, 0.0) == 2
    assert cluster.actor_count(None, 2.0, 0.0) == 1
    assert cluster.actor_count(5, 0.5, 0.0) == 5


@pytest.mark.parametrize(
    ("mode", "token", "said"),
    [
        (None, True, " (here a token is, but RAY_AUTH_MODE is not token: export RAY_AUTH_MODE=token)"),
        (None, False, " (here RAY_AUTH_MODE is not token, and no token is)"),
        ("token", True, ""),
    ],
)
def test_a_refused_join_says_what_token_authentication_lacks_here(
    no_ray: list[dict[str, object]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mode: str | None,
    token: bool,
    said: str,
) -> None:
    # `ray start` writes ~/.ray/auth_token but the command needs RAY_AUTH_MODE=token too: the usual miss, which the
    # error listed among everything a token needs.
    monkeypatch.setattr(cluster, "_check_listening", lambda given, joined: None)
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    if token:
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("0123")
    with pytest.raises(CliError) as caught:
        cluster.connect("10.0.0.7:6379")
    assert str(caught.value).endswith(f"in ~/.ray/auth_token or RAY_AUTH_TOKEN{said}")

"""Joining a Ray cluster (or starting one here) for a batch job, and sizing its actor pool.

The workers load the plugins this process loads: the `DECODEKIT_*` variables go with the job
(Ray's `runtime_env`), so a model or sampler added with `DECODEKIT_EXTRA_PLUGINS` is found there too.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from decodekit_cli.errors import CliError

from decodekit.errors import DecodekitError, ParameterError
from decodekit_ray.parts import disk_error
from decodekit_ray.ray_output import RAY_LOG_LINE, stderr_without

__all__ = ["LOCAL", "actor_count", "actor_failures_unlogged", "connect", "job_env"]

LOCAL = "local"  # `--ray` without an address: start Ray in this process, or join $RAY_ADDRESS
RAY_OWN_ADVICE = (
    "Please specify the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable."
)


def job_env() -> dict[str, str]:
    """The environment the job's workers need: every DECODEKIT_* variable of this process."""
    return {k: v for k, v in os.environ.items() if k.startswith("DECODEKIT_")}


def connect(address: str) -> bool:
    """Join Ray at `address` ("local": start one here, unless $RAY_ADDRESS names one); True when this
    call connected, so the caller disconnects, False when the process was connected already."""
    if ray.is_initialized():
        return False
    joined = os.environ.get("RAY_ADDRESS") if address == LOCAL else address
    given = f"--ray (RAY_ADDRESS={joined})" if address == LOCAL else f"--ray {address}"  # as the user wrote it
    if joined:
        _check_listening(given, joined)
    try:
        # While Ray tries to join a cluster, its C++ client logs each failed try on stderr; the command's one line
        # below says what failed. (Not around a start: Ray's daemons would inherit the pipe.)
        with stderr_without(RAY_LOG_LINE.match) if joined else contextlib.nullcontext():
            if joined:
                _check_authenticated(given, joined)
            ray.init(
                address=joined or "local",  # "local": a new cluster, never one that happens to run here
                runtime_env={"env_vars": job_env()},
                log_to_driver=False,  # the workers' logs stay in Ray's log files; the terminal shows the progress bar
                logging_level=logging.ERROR,  # not Ray's notes on starting up: the command reports what matters
                include_dashboard=None if joined else False,  # only a cluster started here takes it
            )
    except ValueError as exc:  # an address Ray cannot parse; ray:// without Ray Client installed
        raise CliError(f"{given}: {exc}") from None
    except ConnectionError as exc:
        why = str(exc).replace(RAY_OWN_ADVICE, "").strip().rstrip(".")  # Ray's `--address` flag is not decodekit's
        raise _cannot_join(given, why) from None
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # its execution notes go to Ray's log files only
    return True


def _cannot_join(given: str, why: str) -> CliError:
    return CliError(
        f"{given}: cannot join the Ray cluster there: {why}; allowed: a running cluster's address "
        "(`ray start --head` starts one here, which --ray auto joins), or --ray alone, which starts Ray for "
        "this job; a cluster with token authentication (Ray's default) also needs RAY_AUTH_MODE=token and its "
        f"token (`ray get-auth-token` on the head node) here, in ~/.ray/auth_token or RAY_AUTH_TOKEN{_auth_hint()}"
    )


def _check_authenticated(given: str, joined: str) -> None:
    """Refuse at once a cluster that refuses this process's token. `ray.init` tries 20 times, a second apart, and
    then says only that it failed to connect; one try of the client it tries with says why in ~10 ms."""
    if joined == "auto" or "://" in joined:  # ray.init resolves these itself
        return
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]  # ray.init's own client for the join
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray's layout: its own 20 s, then the error below
        return
    try:
        GcsClient(address=joined)
    except AuthenticationError:
        raise _cannot_join(given, "it refused this process's authentication token (missing or incorrect)") from None
    except Exception:  # not ready yet, or unreachable: ray.init tries again, and says so
        return


def _auth_hint() -> str:
    """What the environment lacks for token authentication, when it lacks something (the usual miss: the token is
    here, as `ray start` wrote it, but RAY_AUTH_MODE is not set)."""
    if os.environ.get("RAY_AUTH_MODE") == "token":
        return ""
    if os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").is_file():
        return " (here a token is, but RAY_AUTH_MODE is not token: export RAY_AUTH_MODE=token)"
    return " (here RAY_AUTH_MODE is not token, and no token is)"


def _check_listening(given: str, joined: str) -> None:
    """Refuse at once an address where nothing listens: Ray would try it for minutes, logging each try."""
    if joined == "auto" or "://" in joined:  # `ray start`'s own record; Ray Client's server
        return
    host, _, port = joined.rpartition(":")
    if not port.isdigit():
        return  # Ray's own error names what it cannot parse
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise CliError(
            f"{given}: no Ray cluster answers at {joined} ({exc.strerror or exc}); allowed: the address "
            "`ray start --head` printed (HOST:6379 by default), --ray auto on a node of the cluster, or --ray alone "
            "with RAY_ADDRESS unset, which starts Ray for this job"
        ) from None


def actor_count(actors: int | None, actor_cpus: float, actor_gpus: float) -> int:
    """`actors`, or as many actors of that size as the cluster holds (at least one).

    An actor that no node of the cluster can hold would wait for one forever: that is an error here."""
    if actors is not None and actors < 1:
        raise ParameterError(f"actors={actors} is invalid; allowed: an integer >= 1")
    _check_fits(ray.nodes(), actor_cpus, actor_gpus)  # type: ignore[no-untyped-call]
    if actors is not None:
        return actors
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    sizes = (("CPU", actor_cpus), ("GPU", actor_gpus))
    fits = [math.floor(resources.get(name, 0.0) / need) for name, need in sizes if need]
    return max(1, min(fits, default=1))


def _check_fits(nodes: list[dict[str, Any]], cpus: float, gpus: float) -> None:
    """Refuse an actor size that no live node has (Ray would keep the actors pending, and the job would hang)."""
    sizes = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    if any(r.get("CPU", 0.0) >= cpus and r.get("GPU", 0.0) >= gpus for r in sizes):
        return
    have = ", ".join(sorted({f"{r.get('CPU', 0.0):g} CPUs and {r.get('GPU', 0.0):g} GPUs" for r in sizes})) or "none"
    raise ParameterError(
        f"actor_cpus={cpus:g}, actor_gpus={gpus:g} (--ray-actor-cpus, --ray-actor-gpus): no node of the Ray cluster "
        f"has that much, so no actor could start (its nodes: {have}); allowed: at most one node's CPUs and GPUs, "
        "or add a node that has them to the cluster first"
    )


class _NotTheCommands(logging.Filter):
    """Passes a record unless it is about an error the command says in one line (its own exception, or the one being
    handled): a `DecodekitError`, or a disk that cannot take the parts."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        return not (isinstance(exc, DecodekitError) or (exc is not None and disk_error(exc) is not None))


@contextlib.contextmanager
def actor_failures_unlogged() -> Iterator[None]:
    """Ray Data logs an actor's exception it does not know as its own failure, with the whole traceback; an
    actor's DecodekitError (a CompileError, an ActorSetupError) and a full disk are the command's to report, in one
    line."""
    handlers, quiet = logging.getLogger("ray.data").handlers, _NotTheCommands()
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)

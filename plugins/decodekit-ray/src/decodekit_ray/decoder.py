"""The Ray Data actor of a batch job: it loads the model once, then turns batches of prompt lines
into records with the very functions the local job runs, so a line's record does not depend on
where it was decoded."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import ray
from decodekit_cli.batch_decode import Pending, batches, check_lines, decode_records
from decodekit_cli.batch_input import InputLine
from decodekit_cli.batch_records import Record, dumps, is_error, record_tokens
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.options import load_named_model
from decodekit_cli.sampling_options import set_threads

from decodekit.errors import DecodekitError
from decodekit.param_types import json_words

__all__ = ["ActorSetupError", "LineDecoder"]


class ActorSetupError(DecodekitError):
    """An actor could not load the job's model on its node (a path or a plugin missing there). Raised with
    its first batch: an actor whose constructor fails dies, and reaches the command as `ActorDiedError`
    with the cause flattened into its message and Ray Data's traceback logged."""


class LineDecoder:
    """Called on batches `{"line", "data"}`; returns `{"line", "record", "tokens", "warnings"}`, one row per line."""

    def __init__(
        self, settings: BatchSettings, batch_size: int = 0, checked: bool = False, where: str = "--input"
    ) -> None:
        self.settings = settings
        self.batch_size = batch_size  # the job's: under --compile a smaller batch is padded to it, as locally
        self.where = where  # how a warning names the input ("--input prompts.jsonl line 4 ...")
        # The command checked every line with its plugins: a name unknown here is this node's lack, not the line's.
        self.checked = checked
        self.failure: ActorSetupError | None = None
        try:
            self.model = _on_gpu(load_named_model(settings.model))
        except Exception as exc:
            self.failure = _setup_error("load the model", exc)
            return
        try:  # a sampler, cache or strategy of a plugin only the command's machine has: no line could decode here
            settings.recorded("")
        except DecodekitError as exc:
            self.failure = _setup_error("build the job's chain, cache and strategy", exc)
            return
        set_threads(self.model, settings.threads)  # one thread for a small model: its step is too small to split

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        if self.failure is not None:
            raise self.failure
        with json_words(), warnings.catch_warnings(record=True) as caught:  # json_words: its lines are JSON
            warnings.simplefilter("always")
            rows = self._records(batch)
        # What the decode warned (a line a grammar left incomplete), for the command to print as the local job
        # does: here it would reach only the actor's log. Each text once, on the block's first row.
        said = "\n".join(dict.fromkeys(str(w.message) for w in caught))
        rows["warnings"] = np.array([said if i == 0 else "" for i in range(len(rows["line"]))], dtype=object)
        return rows

    def _records(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        lines = [InputLine(int(n), bytes(d)) for n, d in zip(batch["line"], batch["data"])]
        # Ids are not compared across rows here: each actor sees only its batches (the command checks them).
        checked = check_lines(self.model, self.settings, lines, unique_ids=False)
        records: list[Record] = [item for item in checked if not isinstance(item, Pending)]
        pending = [item for item in checked if isinstance(item, Pending)]
        for group in batches(pending, max(1, sum(p.copies for p in pending))):  # the block: one decode a chain
            records += decode_records(self.model, self.settings, group, rows=self.batch_size, where=self.where)
        if self.checked:
            _refuse_unknown_names(records)
        return {
            "line": np.array([r["line"] for r in records], dtype=np.int64),
            "record": np.array([dumps(r) for r in records], dtype=object),
            "tokens": np.array([record_tokens(r) for r in records], dtype=np.int64),
        }


def _refuse_unknown_names(records: list[Record]) -> None:
    """A line's own chain names a sampler (or strategy) the command has and this node lacks: the job stops, as for
    its model, rather than write an error record the local job would not."""
    for record in records:
        if is_error(record) and record["error"]["type"] == "UnknownNameError":
            raise _setup_error(f"decode line {record['line']}", record["error"]["message"])


def _setup_error(what: str, exc: object) -> ActorSetupError:
    """The job's one line for an actor that cannot run it on its node."""
    node = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return ActorSetupError(
        f"--ray: an actor on node {node} cannot {what}: {exc}; every node needs the model and the plugins the job "
        "uses (docs/scale-out.md, 'What every node needs')"
    )


def _on_gpu(model: Any) -> Any:
    """The model on the GPU Ray gave this actor (`--ray-actor-gpus`), if it gave one; else as loaded."""
    if not ray.get_gpu_ids():
        return model
    import torch

    move = getattr(model, "to", None)  # a torch module; a model of another kind places itself
    return move(torch.device("cuda")) if callable(move) and torch.cuda.is_available() else model

"""`decodekit_ray.generate`: a Dataset of prompt lines in, a Dataset of records out.

The lines are cut into blocks of `batch_size` and materialized first (they are small): the actors
then hold every CPU they ask for without starving a read or repartition task of one, which on a
cluster as small as its actor pool would wait forever. Each block is one call of one actor, so
an actor that dies costs Ray one block to retry.
"""

from __future__ import annotations

import ray.data
from decodekit_cli.batch_settings import BatchSettings

from decodekit_ray.cluster import actor_count
from decodekit_ray.decoder import LineDecoder
from decodekit_ray.lines import from_fields

__all__ = ["generate", "generate_lines"]


def generate(
    ds: ray.data.Dataset,
    settings: BatchSettings,
    *,
    batch_size: int = 8,
    actors: int | None = None,
    actor_cpus: float = 1.0,
    actor_gpus: float = 0.0,
) -> ray.data.Dataset:
    """Decode every prompt of `ds` on a pool of actors, each loading the model once.

    ds: rows of a prompt line's fields (`decodekit_ray.lines.FIELDS`: `prompt` or `prompt_token_ids`, optionally
    `id`, `seed`, `max_new_tokens`, `chain`, `logprobs`, ...; null is left out) and its `line` number (the default
    id and seed derive from it).
    Returns rows `{"line": int, "record": str, "tokens": int, "warnings": str}`: the record is the JSON line
    `decodekit generate --input` writes for that line (a result or an error record), `tokens` how
    many tokens it generated, `warnings` what the decode of the line's block warned, one a line (the command
    prints them: a line a grammar left incomplete), on the block's first row, else "". Ids are not compared
    across rows (the command does).
    """
    return generate_lines(
        from_fields(ds), settings, batch_size=batch_size, actors=actors, actor_cpus=actor_cpus, actor_gpus=actor_gpus
    )


def generate_lines(
    lines: ray.data.Dataset,
    settings: BatchSettings,
    *,
    batch_size: int = 8,
    actors: int | None = None,
    actor_cpus: float = 1.0,
    actor_gpus: float = 0.0,
    checked: bool = False,
    where: str = "--input",
) -> ray.data.Dataset:
    """`generate` over raw prompt lines, rows `{"line", "data"}` (`read_prompt_lines`).

    checked: every line passed the caller's check (the command's), so a name an actor does not know stops the job
    (`ActorSetupError`: its node lacks a plugin) instead of making that line an error record. where: how a warning
    names the lines' input ("--input prompts.jsonl")."""
    size = actor_count(actors, actor_cpus, actor_gpus)  # first: an actor no node can hold is refused before any work
    blocks = lines.repartition(target_num_rows_per_block=batch_size).materialize()
    # No more actors than blocks: an actor without one would only load the model (and Ray Data warns).
    pool = min(size, max(1, blocks.num_blocks()))
    records: ray.data.Dataset = blocks.map_batches(
        LineDecoder,
        fn_constructor_kwargs={"settings": settings, "batch_size": batch_size, "checked": checked, "where": where},
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=pool),
        num_cpus=actor_cpus,
        num_gpus=actor_gpus,
        # Ray Data starts an actor pool with max_restarts=-1 and max_task_retries=-1 (Ray 2.51 on):
        # an actor that dies is started again and the blocks it held are retried on a live one.
    )
    return records

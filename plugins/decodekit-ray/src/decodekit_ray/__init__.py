"""decodekit-ray: `decodekit generate --input ... --output ... --ray [ADDRESS]`, and the same batch job
from Python over a Ray Dataset:

    import ray.data, decodekit_ray
    settings = decodekit_ray.BatchSettings(model="tiny-shakespeare", chain="temperature(0.8)", max_new_tokens=64,
                                           seed=0, cache="dense")
    records = decodekit_ray.generate(ray.data.read_parquet("prompts/"), settings, actors=4)  # with a `line` column

`import decodekit_ray` is light: Ray and torch load on first use of a name that needs them, so
listing plugins (this distribution's entry point) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_cli.batch_settings import BatchSettings

    from decodekit_ray.dataset import generate, generate_lines
    from decodekit_ray.job import RayOptions, run_job
    from decodekit_ray.lines import from_fields, read_prompt_lines

_LAZY = {
    "BatchSettings": "decodekit_cli.batch_settings",
    "generate": "decodekit_ray.dataset",
    "generate_lines": "decodekit_ray.dataset",
    "RayOptions": "decodekit_ray.job",
    "run_job": "decodekit_ray.job",
    "from_fields": "decodekit_ray.lines",
    "read_prompt_lines": "decodekit_ray.lines",
}

__all__ = ["BatchSettings", "RayOptions", "from_fields", "generate", "generate_lines", "read_prompt_lines", "run_job"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'decodekit_ray' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""The plugin distributions of this repository, by the names they register: the command line's
`pip install` hints for a name that is not installed (the core knows no plugin by name)."""

from __future__ import annotations

__all__ = ["PLUGIN_NEEDS", "STANDARD_PLUGINS"]

STANDARD_PLUGINS: dict[str, str] = {
    "greedy": "decodekit-greedy",
    "temperature": "decodekit-temperature",
    "top_k": "decodekit-top-k",
    "top_p": "decodekit-top-p",
    "repetition_penalty": "decodekit-repetition-penalty",
    "json_schema": "decodekit-grammar",
    "json": "decodekit-grammar",
    "regex": "decodekit-grammar",
    "grammar": "decodekit-grammar",
    "dense": "decodekit-cache-dense",
    "gqa": "decodekit-cache-gqa",
    "int8": "decodekit-cache-int8",
    "window": "decodekit-cache-window",
    "beam": "decodekit-beam",
    "speculative": "decodekit-speculative",
    "cfg": "decodekit-guidance",
    "tiny-shakespeare": "decodekit-shakespeare",
    "tiny-shakespeare-draft": "decodekit-shakespeare",
    "tiny-shakespeare-llama": "decodekit-shakespeare-llama",
    "gpt2": "decodekit-gpt",
    "hf": "decodekit-hf",
}

# The plugins each plugin needs at run time (its pyproject's dependencies): from a checkout, pip finds
# them on no index, so an install hint names their folders too.
PLUGIN_NEEDS: dict[str, tuple[str, ...]] = {
    "decodekit-shakespeare": ("decodekit-gpt", "decodekit-cache-window"),
    "decodekit-shakespeare-llama": ("decodekit-hf",),
    "decodekit-ray": ("decodekit-cli",),
}

"""The decodekit entry point: registers `tiny-shakespeare-llama` by import path (imports no torch)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import Registrar

__all__ = ["register_models"]


@hookimpl
def register_models(register: Registrar) -> None:
    register(
        "tiny-shakespeare-llama",
        "decodekit_shakespeare_llama.model:load_tiny_shakespeare_llama",
        description="Character-level LlamaForCausalLM (GQA 8/2 heads, rope) trained on Shakespeare's works",
    )

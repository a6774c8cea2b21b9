"""The decodekit entry point: registers `tiny-shakespeare` and its draft by import path (imports no torch)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import Registrar

__all__ = ["register_models"]


@hookimpl
def register_models(register: Registrar) -> None:
    register(
        "tiny-shakespeare",
        "decodekit_shakespeare.model:load_tiny_shakespeare",
        description="Character-level GPT (GQA 8/2 heads) trained on Shakespeare's works",
    )
    register(
        "tiny-shakespeare-draft",
        "decodekit_shakespeare.model:load_tiny_shakespeare_draft",
        description="A 1-layer LSTM distilled from tiny-shakespeare (same tokenizer), its speculative draft",
    )

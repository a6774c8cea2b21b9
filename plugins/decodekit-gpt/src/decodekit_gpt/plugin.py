"""Registers the `gpt2` model loader by import path (imports no torch)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import Registrar


@hookimpl
def register_models(register: Registrar) -> None:
    register(
        "gpt2",
        "decodekit_gpt.gpt2_weights:load_gpt2_model",
        description="GPT-2 weights in the reference GPT: dk.load_model('gpt2:/path/to/save_pretrained/dir')",
    )

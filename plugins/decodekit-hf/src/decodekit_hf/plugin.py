"""The decodekit entry point: registers the `hf` model loader by import path (imports no torch or transformers)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import Registrar
from decodekit_hf.params import HFParams

__all__ = ["register_models"]


@hookimpl
def register_models(register: Registrar) -> None:
    register(
        "hf",
        "decodekit_hf.model:load_hf",
        params=HFParams,
        description="A local Hugging Face transformers causal LM: dk.load_model('hf(dtype=bfloat16):/path/to/dir')",
    )

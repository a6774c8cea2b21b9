"""Registers `top_p`; imports no torch (the implementation loads on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_top_p.params import TopPParams


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register(
        "top_p",
        "decodekit_top_p.top_p:TopP",
        TopPParams,
        "Nucleus: keep the smallest most-probable prefix whose probability reaches p",
    )

"""Registers `top_k`; imports no torch (the implementation loads on first use)."""

from __future__ import annotations

from decodekit import hookimpl
from decodekit.hookspecs import SamplerRegistrar
from decodekit_top_k.params import TopKParams


@hookimpl
def register_samplers(register: SamplerRegistrar) -> None:
    register("top_k", "decodekit_top_k.top_k:TopK", TopKParams, "Keep the k largest logits (ties at the k-th kept)")

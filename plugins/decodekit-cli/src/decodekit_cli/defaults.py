"""Defaults of the `generate` and `explain` commands (shown in --help, so kept free of torch)."""

from __future__ import annotations

__all__ = ["DEFAULT_CHAIN", "DEFAULT_MAX_NEW_TOKENS", "DEFAULT_MODEL"]

DEFAULT_CHAIN = "temperature(0.8) | top_p(0.95)"  # with no sampling options; `sample` selects
DEFAULT_MODEL = "tiny-shakespeare"
DEFAULT_MAX_NEW_TOKENS = 100  # generate's, where neither --max-new-tokens nor the model gives one

"""decodekit-hf: Hugging Face transformers models in decodekit, and decodekit chains in transformers.

- `HFModel(model, tokenizer=None)` adapts any `AutoModelForCausalLM` to decodekit's model
  protocol; decodekit's cache backends serve it through `DecodekitCache`, a transformers `Cache`.
- `as_logits_processor(chain)` runs a decodekit chain inside `model.generate(logits_processor=[...])`.
- `generation_chain(config_or_model_or_dir)` is the chain that does what `generate()` does with a checkpoint's
  generation config (`HFModel.generation_defaults`, which `decodekit generate` samples with when given no chain);
  `generation_options(...)` is all of it as `dk.decode` keyword arguments: strategy (beam, cfg), chain, length, stops.
- `dk.load_model("hf:/path")` loads a local checkpoint (registered by `decodekit_hf.plugin`).

Importing this package is light: torch and transformers load on first use of a name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_hf.cache_bridge import DecodekitCache
    from decodekit_hf.checkpoint_options import generation_options
    from decodekit_hf.generation_config import generation_chain
    from decodekit_hf.model import HFModel, load_hf, model_spec
    from decodekit_hf.processor import ChainLogitsProcessor, as_logits_processor
    from decodekit_hf.tokenizer import HFTokenizer

__all__ = [
    "ChainLogitsProcessor",
    "DecodekitCache",
    "HFModel",
    "HFTokenizer",
    "as_logits_processor",
    "generation_chain",
    "generation_options",
    "load_hf",
    "model_spec",
]

_LAZY = {
    "DecodekitCache": "decodekit_hf.cache_bridge",
    "HFModel": "decodekit_hf.model",
    "load_hf": "decodekit_hf.model",
    "model_spec": "decodekit_hf.model",
    "ChainLogitsProcessor": "decodekit_hf.processor",
    "as_logits_processor": "decodekit_hf.processor",
    "HFTokenizer": "decodekit_hf.tokenizer",
    "generation_chain": "decodekit_hf.generation_config",
    "generation_options": "decodekit_hf.checkpoint_options",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'decodekit_hf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

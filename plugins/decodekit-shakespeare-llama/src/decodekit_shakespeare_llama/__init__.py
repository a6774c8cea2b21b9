"""decodekit-shakespeare-llama: `tiny-shakespeare-llama`, a character-level `LlamaForCausalLM`.

The model ships as a Hugging Face `save_pretrained` folder (`model_dir()`); importing this package
imports neither torch nor transformers.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["__version__", "model_dir"]

__version__ = "0.1.0"


def model_dir() -> Path:
    """The shipped folder: config, safetensors weights and tokenizer, for `from_pretrained` or `hf:`."""
    return Path(__file__).resolve().parent / "tiny-shakespeare-llama"

"""decodekit-beam: beam search with Hugging Face's semantics, a policy over decodekit's engine.

Importing this package is light; torch loads with `decodekit_beam.search`.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"

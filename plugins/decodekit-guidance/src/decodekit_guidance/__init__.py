"""decodekit-guidance: classifier-free guidance with Hugging Face's semantics, a policy over decodekit's engine.

Importing this package is light; torch loads with `decodekit_guidance.strategy`.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"

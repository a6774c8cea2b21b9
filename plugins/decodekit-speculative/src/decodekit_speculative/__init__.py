"""decodekit-speculative: speculative decoding, exact for any speculation-safe chain.

Importing this package is light; torch loads with `decodekit_speculative.strategy`.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"

"""decodekit-watermark: a text watermark and its detector (Kirchenbauer et al. 2023, "A Watermark for Large
Language Models"; transformers' `WatermarkLogitsProcessor` and `WatermarkDetector`, bit for bit).

`watermark(bias, greenlist_ratio, hashing_key, seeding_scheme, context_width)`, a processor, adds `bias` to a
"green" share of the vocabulary drawn afresh at each step from the tokens before it; `detect(tokens, ...)` counts
the green tokens of a text and says how unlikely that many are without the watermark (a z-score).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decodekit_watermark.detection import Detection, detect

__all__ = ["Detection", "detect"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`detect` and `Detection` load torch on first use: listing plugins imports this package without it."""
    if name in __all__:
        from decodekit_watermark import detection

        return getattr(detection, name)
    raise AttributeError(f"module 'decodekit_watermark' has no attribute {name!r}")

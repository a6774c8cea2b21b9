"""The conformance kit: reusable checks a plugin author runs against their own sampler, cache or model.

Use the functions directly, or subclass the pytest suites::

    from decodekit.testing import ProcessorConformance

    class TestMyProcessor(ProcessorConformance):
        def make(self):
            return MyProcessor(strength=0.5)

Modules: `inputs` (logits, histories, `ctx_for` and `NEG` for hand-made tests), `processors`,
`selectors`, `models`, `host_reads` (a decode step reads nothing back, on fake tensors), `caches`,
`strategies`, `registry`.
"""

from decodekit.testing.caches import CacheConformance, check_cache
from decodekit.testing.inputs import NEG, ctx_for, random_logits
from decodekit.testing.models import ModelConformance, check_model
from decodekit.testing.processors import ProcessorConformance, check_processor
from decodekit.testing.selectors import SelectorConformance, check_selector
from decodekit.testing.suite import KitOptions, KitSettings

__all__ = [
    "NEG",
    "CacheConformance",
    "KitOptions",
    "KitSettings",
    "ModelConformance",
    "ProcessorConformance",
    "SelectorConformance",
    "check_cache",
    "check_model",
    "check_processor",
    "check_selector",
    "ctx_for",
    "random_logits",
]

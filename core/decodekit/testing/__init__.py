"""The conformance kit: reusable checks a plugin author runs against their own sampler or cache.

Use the functions directly, or subclass the pytest suites::

    from decodekit.testing import ProcessorConformance

    class TestMyProcessor(ProcessorConformance):
        def make(self):
            return MyProcessor(strength=0.5)
"""

from decodekit.testing.caches import CacheConformance, check_cache
from decodekit.testing.samplers import (
    ProcessorConformance,
    SelectorConformance,
    check_processor,
    check_selector,
)

__all__ = [
    "CacheConformance",
    "ProcessorConformance",
    "SelectorConformance",
    "check_cache",
    "check_processor",
    "check_selector",
]

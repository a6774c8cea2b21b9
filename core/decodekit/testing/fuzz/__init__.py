"""Property-based fuzzing (hypothesis) of every registered sampler, chain strings and specs, and the
decode loop: zero exceptions but decodekit's own, zero revived or out-of-range tokens, the candidates
fast path equal to `Chain.process`, inputs never mutated.

Plugin authors fuzz their own samplers, alone or mixed with every other installed one::

    from decodekit.testing.fuzz import ACCEPTED, TARGETS, chain_cases, registered_samplers, run_case

    @given(chain_cases(registered_samplers(("my_sampler", "top_k", "sample"))))
    def test_my_sampler(case):
        assert all(f.kind in ACCEPTED for f in run_case(TARGETS["chains"], case))

`fuzz(10_000)` runs and counts, rather than stopping at the first failure (`make fuzz`).
"""

from decodekit.testing.fuzz.catalogue import SamplerInfo, registered_samplers
from decodekit.testing.fuzz.chains import ChainCase, chain_cases, check_chain_case, check_logits
from decodekit.testing.fuzz.compose import ComposeCase, check_compose_case, compose_cases
from decodekit.testing.fuzz.generation import GenerateCase, check_generate_case, generate_cases
from decodekit.testing.fuzz.outcomes import ACCEPTED, Finding, Report
from decodekit.testing.fuzz.run import TARGETS, Tally, Target, fuzz, memory_limit, run_case
from decodekit.testing.fuzz.specs import SpecCase, check_spec_case, spec_cases

__all__ = [
    "ACCEPTED",
    "TARGETS",
    "ChainCase",
    "ComposeCase",
    "Finding",
    "GenerateCase",
    "Report",
    "SamplerInfo",
    "SpecCase",
    "Tally",
    "Target",
    "chain_cases",
    "check_chain_case",
    "check_compose_case",
    "check_generate_case",
    "check_logits",
    "check_spec_case",
    "compose_cases",
    "fuzz",
    "generate_cases",
    "memory_limit",
    "registered_samplers",
    "run_case",
    "spec_cases",
]

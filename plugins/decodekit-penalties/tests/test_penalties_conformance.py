"""The conformance kit on every penalty sampler; a 6-token vocabulary so the random histories repeat."""

from __future__ import annotations

from typing import ClassVar

import torch

from decodekit.testing import ProcessorConformance


class _Penalty(ProcessorConformance):
    vocab_size: ClassVar[int] = 6
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)


class TestFrequencyPenalty(_Penalty):
    spec = ("frequency_penalty", {"penalty": 0.7})


class TestPresencePenalty(_Penalty):
    spec = ("presence_penalty", {"penalty": -0.7, "last_n": 2})


class TestNoRepeatNGram(_Penalty):
    spec = ("no_repeat_ngram", {"ngram_size": 2})


class TestNoRepeatNGramWindow(_Penalty):
    spec = ("no_repeat_ngram", {"ngram_size": 1, "last_n": 4})


class TestDRY(_Penalty):
    spec = ("dry", {"multiplier": 0.8, "allowed_length": 1})
    # Eager, its repeat search grows until the longest repeat in the history is found, and it returns early
    # when none is long enough: both read the history back. Compiled, it does neither (test_dry.py).
    reads_back = "eager, the repeat search's length depends on the history (dry.py: _repeat_lengths)"


class TestDRYBreakers(TestDRY):
    spec = (
        "dry",
        {"multiplier": 0.8, "base": 2.0, "allowed_length": 1, "last_n": 8, "sequence_breakers": [[0], [3, 4]]},
    )


class TestFrequencyPenaltyWithThePrompt(_Penalty):
    spec = ("frequency_penalty", {"penalty": 0.7, "last_n": 5, "include_prompt": True})

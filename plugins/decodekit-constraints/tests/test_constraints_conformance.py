"""The conformance kit on every constraint sampler; token ids small, so the random histories match them."""

from __future__ import annotations

from typing import ClassVar

import torch

from decodekit.testing import ProcessorConformance


class _Constraint(ProcessorConformance):
    vocab_size: ClassVar[int] = 6
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)


class TestLogitBias(_Constraint):
    spec = ("logit_bias", {"bias": {0: -3.0, 2: 1.5, 5: 100.0}})


class TestSequenceBias(_Constraint):
    spec = ("sequence_bias", {"biases": [[[1], 0.5], [[0, 2], -2.0], [[3, 2], 1.0], [[1, 0, 4], 3.0]]})


class TestBadWords(_Constraint):
    spec = ("bad_words", {"sequences": [[5], [0, 1], [2, 3], [0, 4, 2]]})


class TestAllowedTokens(_Constraint):
    spec = ("allowed_tokens", {"tokens": [0, 2, 3]})


class TestMinNewTokens(_Constraint):
    spec = ("min_new_tokens", {"n": 5, "stop_tokens": [0, 4]})


class TestExponentialDecay(_Constraint):
    spec = ("exponential_decay", {"start": 1, "factor": 1.5, "stop_tokens": [0, 4]})


class TestReasoningBudget(_Constraint):
    reads_back = "the state machine runs on the host, over each row's generated tokens (reasoning_budget.py)"
    spec = ("reasoning_budget", {"budget": 2, "start": [1], "end": [2, 3], "forced": [4, 2, 3]})


class TestReasoningBudgetOpen(_Constraint):
    reads_back = TestReasoningBudget.reads_back
    spec = ("reasoning_budget", {"budget": 1, "start": [1, 1], "end": [2], "open": True})

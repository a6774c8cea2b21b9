"""What each stage of a chain does to the next-token distribution, step by step, as plain data.

`explain_steps` runs `dk.generate`'s strategy on the engine and, at each step, records
`chain.trace` (the dense logits after every stage, as `chain.process` computes them) on a fork of
the context the step's chain sees, so with the same seed and cache it picks the tokens
`decodekit generate` prints.
Rendering lives in `decodekit_cli.explain_render`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from decodekit.chain import Chain, stage_label
from decodekit.engine import Decoding, Policy, sample_steps
from decodekit.errors import ParameterError
from decodekit.model import Model
from decodekit.params import NoParams, Params
from decodekit.request import decode_request

__all__ = ["StageReport", "StepReport", "explain_policy", "explain_steps", "stage_stats"]


@dataclass(frozen=True)
class StageReport:
    """The distribution after one stage ("input": the model's logits)."""

    stage: str
    survivors: int  # tokens whose logit is finite
    entropy: float  # nats, of softmax over the surviving tokens
    probs: list[float]  # aligned with StepReport.candidates

    def top(self, candidates: Sequence[int], n: int) -> list[tuple[int, float]]:
        """The `n` most likely tokens after this stage, as (token, probability), probability > 0."""
        pairs = sorted(zip(candidates, self.probs), key=lambda tp: -tp[1])
        return [(t, p) for t, p in pairs if p > 0][:n]


@dataclass(frozen=True)
class StepReport:
    """One generated step: the token picked and the distribution after each stage."""

    step: int
    token: int  # the token picked at this step
    candidates: list[int]  # each stage's top tokens and the picked one, most likely input token first
    texts: list[str | None]  # their text (None without a tokenizer)
    stages: list[StageReport]
    # What ended the row with this step, as generate's `stopped_by`: a stage's name or a stop token's id; None: went on.
    ended_by: int | str | None = None

    @property
    def text(self) -> str | None:
        return self.texts[self.candidates.index(self.token)]


def stage_stats(logits: Tensor) -> tuple[int, float, Tensor]:
    """(survivors, entropy in nats, probabilities) of one row of logits `[V]`."""
    finite = torch.isfinite(logits)
    logp = torch.log_softmax(logits.float(), -1)
    probs = logp.exp()
    entropy = -torch.where(finite, probs * logp, torch.zeros_like(probs)).sum()
    return int(finite.sum()), max(0.0, float(entropy)), probs  # one survivor: -0.0, shown "-0.000"


def explain_steps(
    model: Model,
    prompt: str | Sequence[int],
    chain: Chain,
    *,
    steps: int,
    top: int = 5,
    seed: int | None = None,
    cache: str = "none",
    stop_tokens: Sequence[int] = (),
) -> list[StepReport]:
    """Generate `steps` tokens after `prompt`, reporting each stage of `chain` at every step.

    The "sample" strategy on the engine, with a look at every step: the same tokens as
    `dk.generate(model, prompt, chain=chain, max_new_tokens=steps, seed=seed, cache=cache, stop_tokens=stop_tokens)`.
    cache: "none" recomputes the whole context every step; a backend name decodes through it.
    """
    if top < 1:
        raise ParameterError(f"explain: top={top} is invalid; allowed: an integer >= 1")
    if steps < 1:
        raise ParameterError(f"explain: steps={steps} is invalid; allowed: an integer >= 1")
    prompts = [prompt] if isinstance(prompt, str) else [list(prompt)]
    request = decode_request(
        model, prompts, chain=chain, max_new_tokens=steps, seed=seed, cache=cache, stop_tokens=list(stop_tokens)
    )
    traces: list[list[tuple[str, Tensor]]] = []
    decoding = Decoding(request, "explain", events=False)
    for _ in decoding.run(explain_policy(traces), NoParams(), per_round=False):
        pass
    generation = decoding.generation()
    tokens, ended_by = generation.tokens[0], generation.stopped_by[0]
    names = ["input", *map(stage_label, chain.processors)]  # as `str(chain)` writes them
    tokenizer = getattr(model, "tokenizer", None)
    reports = [
        _step_report(step, token, [(name, logits) for name, (_, logits) in zip(names, trace)], top, tokenizer)
        for step, (token, trace) in enumerate(zip(tokens, traces))
    ]
    if reports and ended_by is not None:  # a stage (a grammar), a stop token: fewer steps than asked
        reports[-1] = dataclasses.replace(reports[-1], ended_by=ended_by)
    return reports


def explain_policy(traces: list[list[tuple[str, Tensor]]]) -> Policy:
    """The "sample" policy, appending each step's `chain.trace` to `traces`: it opens its decoding at its
    call, then returns its rounds."""

    def explain(d: Decoding, params: Params) -> Iterator[None]:
        d.open()  # now, not in a generator: its checks refuse at the call, as the built-in strategies' do
        # The trace runs on a fork: stateful and random stages see exactly what the step's own
        # chain run sees (the same state, the same draws), and advance once per step.
        return sample_steps(d, before=lambda logits: traces.append(d.chain.trace(logits, d.ctx.fork())))

    return explain


def _step_report(step: int, token: int, trace: list[tuple[str, Tensor]], top: int, tokenizer: Any) -> StepReport:
    stats = [(name, *stage_stats(logits[0])) for name, logits in trace]
    chosen: set[int] = {token}
    for _, survivors, _, probs in stats:
        chosen.update(probs.topk(min(top, survivors)).indices.tolist())
    input_probs = stats[0][3]
    candidates = sorted(chosen, key=lambda t: (-float(input_probs[t]), t))
    index = torch.tensor(candidates)
    stages = [
        StageReport(name, survivors, entropy, probs[index.to(probs.device)].tolist())
        for name, survivors, entropy, probs in stats
    ]
    texts = [tokenizer.decode([t]) if tokenizer is not None else None for t in candidates]
    return StepReport(step, token, candidates, texts, stages)

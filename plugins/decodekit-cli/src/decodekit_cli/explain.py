"""What each stage of a chain does to the next-token distribution, step by step, as plain data.

`explain_steps` runs the decode loop of `dk.generate` one step at a time, without a cache (the
whole context, cropped to the model's window, every step) or through one: at each step it records
`chain.trace` (the dense logits after every stage, as `chain.process` computes them), then
picks the token with `chain.select` on the same context and generators as the decode loop, so
with the same seed and cache it picks the tokens `decodekit generate` prints.
Rendering lives in `decodekit_cli.explain_render`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from decodekit.chain import Chain
from decodekit.context import DecodeContext, row_generators
from decodekit.errors import ContextLengthError, ParameterError
from decodekit.plugins import create_cache
from decodekit.spec import CacheSpec
from decodekit.stage import Stage

__all__ = ["StageReport", "StepReport", "explain_steps", "stage_label", "stage_stats"]


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

    @property
    def text(self) -> str | None:
        return self.texts[self.candidates.index(self.token)]


def stage_label(stage: object) -> str:
    """A stage as in a chain string, with only the parameters that differ from their defaults."""
    if isinstance(stage, Stage):
        args = ", ".join(f"{k}={v!r}" for k, v in stage.params.model_dump(exclude_defaults=True).items())
        return f"{stage.name}({args})" if args else stage.name
    return repr(stage)


def stage_stats(logits: Tensor) -> tuple[int, float, Tensor]:
    """(survivors, entropy in nats, probabilities) of one row of logits `[V]`."""
    finite = torch.isfinite(logits)
    logp = torch.log_softmax(logits.float(), -1)
    probs = logp.exp()
    entropy = -torch.where(finite, probs * logp, torch.zeros_like(probs)).sum()
    return int(finite.sum()), float(entropy), probs


def _next_logits(model: Any, tokens: list[int], device: torch.device) -> Tensor:
    """The model's logits `[1, V]` for the token after `tokens`, cropped to its context."""
    window = tokens[-model.spec.max_positions :]
    ids = torch.tensor([window], dtype=torch.long, device=device)
    positions = torch.arange(len(window), device=device)[None]
    logits: Tensor = model(ids, positions, None)[:, -1]
    return logits.float()


def _model_device_dtype(model: Any) -> tuple[torch.device, torch.dtype]:
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            return torch.device(p.device), p.dtype
    return torch.device("cpu"), torch.float32


class _Logits:
    """The model's next-token logits `[1, V]` step by step: recomputed ("none") or through a cache."""

    def __init__(self, model: Any, cache: str, capacity: int, device: torch.device, dtype: torch.dtype) -> None:
        self.model, self.device, self.kv, self.seen = model, device, None, 0
        if cache != "none":
            if capacity > model.spec.max_positions:
                raise ContextLengthError(
                    f"explain: {capacity} tokens (prompt + steps) exceed the model's context of "
                    f"{model.spec.max_positions} positions; allowed with cache='none' (it crops the context)"
                )
            spec = CacheSpec.for_model(model.spec, batch_size=1, capacity=capacity, dtype=dtype, device=device)
            self.kv = create_cache(cache, spec)

    def __call__(self, tokens: list[int]) -> Tensor:
        if self.kv is None:
            return _next_logits(self.model, tokens, self.device)
        new = tokens[self.seen :]  # the prompt at the first step, then the token just picked
        ids = torch.tensor([new], dtype=torch.long, device=self.device)
        positions = torch.arange(self.seen, len(tokens), device=self.device)[None]
        self.seen = len(tokens)
        logits: Tensor = self.model(ids, positions, self.kv)[:, -1]
        return logits.float()


def explain_steps(
    model: Any,
    prompt: str | Sequence[int],
    chain: Chain,
    *,
    steps: int,
    top: int = 5,
    seed: int | None = None,
    cache: str = "none",
) -> list[StepReport]:
    """Generate `steps` tokens after `prompt`, reporting each stage of `chain` at every step.

    cache: "none" recomputes the whole context every step; a backend name decodes through it,
    as `dk.generate(..., cache=name)` does.
    """
    tokenizer = getattr(model, "tokenizer", None)
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ParameterError("explain: the model has no tokenizer; pass the prompt as token ids")
        ids = list(tokenizer.encode(prompt))
    else:
        ids = [int(t) for t in prompt]
    if not ids:
        raise ParameterError("explain: the prompt is empty; allowed: at least one token")
    if steps < 1 or top < 1:
        raise ParameterError(f"explain: steps={steps}, top={top}; allowed: both >= 1")
    device, dtype = _model_device_dtype(model)
    next_logits = _Logits(model, cache, len(ids) + steps, device, dtype)
    ctx = DecodeContext(tokens=torch.tensor([ids], device=device), generators=row_generators(seed, 1, device))
    chain.init_state(ctx)
    names = ["input", *(stage_label(p) for p in chain.processors)]
    reports = []
    with torch.inference_mode():
        for step in range(steps):
            ctx.tokens, ctx.step = torch.tensor([ids], device=device), step
            raw = next_logits(ids)
            # The trace runs on a fork: stateful and random stages see exactly what the real step
            # below sees (the same state, the same draws), and advance once per step.
            trace = chain.trace(raw, ctx.fork())  # [("input", logits), (repr(stage), logits), ...]
            token = int(chain(raw, ctx)[0])  # as the decode loop picks it; NumericsError if impossible
            named = [(name, logits) for name, (_, logits) in zip(names, trace)]
            reports.append(_step_report(step, token, named, top, tokenizer))
            ids.append(token)
    return reports


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

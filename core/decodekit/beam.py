"""Beam search: keep the `num_beams` most likely continuations of every prompt.

The semantics are those of Hugging Face transformers 5 (`GenerationMixin._beam_search` in
`transformers/generation/utils.py`) for decoder-only models:

- a beam's score is the sum of the log-probabilities of its tokens, `log_softmax(logits)`
  after the chain's processors (HF runs its logits processors on log-softmaxed scores too);
- each step ranks the `K = max(2, 1 + n_stop) · num_beams` best (beam, token) candidates of a
  prompt; the best `num_beams` that do not end in a stop token keep running, and those among
  the first `num_beams` that do end in one (or reach `max_new_tokens`) become finished
  hypotheses scored `sum_logprobs / generated_length ** length_penalty`, where the generated
  length counts the new tokens including the stop token;
- a prompt keeps its `num_beams` best finished hypotheses and closes when they cannot be beaten
  (`early_stopping`, see `beam_search`).

The KV cache holds `B · num_beams` rows (row `b · num_beams + i` is beam `i` of prompt `b`) and
follows the beams with `reorder(index)`. Ragged prompts are left-padded as in `decodekit.prompts`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from typing_extensions import Unpack

from decodekit.chain import numerics_error
from decodekit.context import DecodeContext, row_generators
from decodekit.errors import NumericsError, ParameterError
from decodekit.loop import check_context, model_device_dtype, uncached_last_logits
from decodekit.params import Params, validate_params
from decodekit.prompts import Prompts, left_pad
from decodekit.request import DecodeOptions, DecodeRequest, decode_request
from decodekit.results import FinishReason, Generation
from decodekit.spec import CacheSpec
from decodekit.strategy_params import BeamParams, EarlyStopping

__all__ = ["BeamGeneration", "BeamParams", "beam_search", "beam_strategy"]

_NEG_INF = float("-inf")


@dataclass
class BeamGeneration(Generation):
    """A `Generation` whose row `b` is the best hypothesis of prompt `b`, plus, per prompt, the best
    `num_return_sequences` hypotheses (`sequences[b]`, best first) and their `scores[b]`
    (sum of log-probabilities / generated length ** length_penalty)."""

    sequences: list[list[list[int]]] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)


@dataclass
class _Finished:
    """The best finished hypotheses of each prompt, best first; invalid slots score -inf.

    scores: [B, N]  tokens: [B, N, max_new_tokens]  lengths: [B, N]  valid: [B, N]
    """

    scores: Tensor
    tokens: Tensor
    lengths: Tensor
    valid: Tensor


def _check_request(request: DecodeRequest, params: BeamParams) -> None:
    """What beam search cannot honour, and what would not fit in memory, fails before any work."""
    if params.num_return_sequences > params.num_beams:
        raise ParameterError(
            f"num_return_sequences={params.num_return_sequences} is invalid; "
            f"allowed: an integer, 1 <= num_return_sequences <= num_beams={params.num_beams}"
        )
    if request.stop_strings:
        raise ParameterError("beam_search: stop_strings are not supported; allowed: stop_tokens")
    if request.logprobs is not None:
        raise ParameterError("beam_search: logprobs is not supported (each hypothesis' score is in `scores`)")
    if request.compile:
        raise ParameterError("beam_search: compile=True is not supported; allowed: False")
    # The hypotheses hold every generated token: [B, 3 · num_beams, max_new_tokens] int64 at once.
    rows, M = request.batch_size * params.num_beams, request.max_new_tokens
    memory = _physical_memory()
    if memory is not None and 8 * 3 * rows * (M + max(map(len, request.prompts))) > memory // 2:
        allowed = memory // 2 // (8 * 3 * rows) - max(map(len, request.prompts))
        raise ParameterError(
            f"max_new_tokens={M} is invalid for beam search with {rows} beams: its hypotheses would not fit "
            f"in memory; allowed: max_new_tokens <= {max(allowed, 0)} here"
        )


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_numerics(raw: Tensor, logp: Tensor, running: Tensor, step: int) -> None:
    """NaN or +inf anywhere, or a live beam (finite score) with every token removed, is an error."""
    B, N = running.shape
    bad = torch.isnan(logp).any(-1) | torch.isposinf(logp).any(-1)  # [B*N]
    bad |= running.isfinite().flatten() & ~(logp > _NEG_INF).any(-1)
    if bool(bad.any()):
        flat = int(bad.nonzero()[0, 0])
        b, i = divmod(flat, N)
        V = raw.shape[-1]
        err = numerics_error(raw.view(B, N, V)[:, i], logp.view(B, N, V)[:, i], b, step)
        raise NumericsError(f"{err} (beam {i})")


def _hypotheses(finished: _Finished, b: int, n: int) -> tuple[list[list[int]], list[float]]:
    """The best `n` finished hypotheses of prompt `b` (fewer only if fewer finished) and their scores."""
    out, scores = [], []
    for i in range(min(n, int(finished.valid[b].sum()))):
        out.append(finished.tokens[b, i, : int(finished.lengths[b, i])].tolist())
        scores.append(float(finished.scores[b, i]))
    return out, scores


def beam_search(
    model: Any,
    prompts: Prompts,
    *,
    num_beams: int = 4,
    length_penalty: float = 1.0,
    early_stopping: EarlyStopping = False,
    num_return_sequences: int = 1,
    **options: Unpack[DecodeOptions],
) -> BeamGeneration:
    """Beam search with Hugging Face's semantics; returns the best hypothesis of each prompt.

    length_penalty: finished hypotheses score `sum_logprobs / generated_length ** length_penalty`;
        > 0 favours longer ones, < 0 shorter ones, 0 compares raw sums (-10 <= length_penalty <= 10).
    early_stopping: when a prompt holding `num_beams` finished hypotheses is done —
        True: at once; False: when the best running beam, scored at its current length, cannot
        beat the worst kept hypothesis (HF's heuristic); "never": the same test with the running
        beam scored at `max_new_tokens` when length_penalty > 0 (the exact bound).
    The other options are `dk.generate`'s (`DecodeOptions`), read as follows. chain: only its
    processors are used (on the log-probabilities); its selector is ignored. Stateful stages
    see one row per beam; their per-row state does not follow the beams. stop_tokens: ids that
    finish a hypothesis. seed: for chain stages that draw random numbers (one generator per
    beam row). stop_strings, logprobs and compile are not supported: a value other than the
    default is a `ParameterError`.

    `tokens[b]` is the best hypothesis (a stop token that ended it is its last token) and
    `sequences[b]`, `scores[b]` the best `num_return_sequences`, best first.
    """
    own = {
        "num_beams": num_beams,
        "length_penalty": length_penalty,
        "early_stopping": early_stopping,
        "num_return_sequences": num_return_sequences,
    }
    params = validate_params("beam_search", BeamParams, own)
    request = decode_request(model, prompts, "beam_search", tuple(own), **options)
    return beam_strategy(request, params)


def beam_strategy(request: DecodeRequest, params: Params) -> BeamGeneration:
    """The "beam" strategy: `beam_search` on a checked request."""
    assert isinstance(params, BeamParams)
    _check_request(request, params)
    rows, stops = request.prompts, request.stop_tokens
    if request.max_new_tokens == 0:
        return _result(request.model, rows, stops, [[[]] for _ in rows], [[0.0] for _ in rows])
    finished = _BeamSteps(request, params).run()
    best = [_hypotheses(finished, b, params.num_return_sequences) for b in range(len(rows))]
    return _result(request.model, rows, stops, [s for s, _ in best], [sc for _, sc in best])


def _result(
    model: Any,
    rows: list[list[int]],
    stops: list[frozenset[int]],
    sequences: list[list[list[int]]],
    scores: list[list[float]],
) -> BeamGeneration:
    tokens = [seqs[0] for seqs in sequences]
    stopped_by: list[int | str | None] = [t[-1] if t and t[-1] in s else None for t, s in zip(tokens, stops)]
    reasons: list[FinishReason] = ["stop" if s is not None else "length" for s in stopped_by]
    tokenizer = getattr(model, "tokenizer", None)
    text = None
    if tokenizer is not None:
        text = [tokenizer.decode(t[:-1] if s is not None else t) for t, s in zip(tokens, stopped_by)]
    return BeamGeneration(
        tokens=tokens,
        finish_reasons=reasons,
        prompt_tokens=rows,
        text=text,
        stopped_by=stopped_by,
        sequences=sequences,
        scores=scores,
    )


def _beam_seeds(seed: int | tuple[int, ...], num_beams: int) -> int | tuple[int, ...]:
    """Per-prompt seeds repeated for each beam of the prompt (one int seeds every row itself)."""
    return seed if isinstance(seed, int) else tuple(s for s in seed for _ in range(num_beams))


class _BeamSteps:
    """The state of one beam search: running beams (in `buf` and the cache) and finished hypotheses."""

    def __init__(self, request: DecodeRequest, params: BeamParams) -> None:
        model, rows, stops = request.model, request.prompts, request.stop_tokens
        B, N, M = len(rows), params.num_beams, request.max_new_tokens
        spec = model.spec
        self.model, self.B, self.N, self.M = model, B, N, M
        self.length_penalty, self.early_stopping = params.length_penalty, params.early_stopping
        self.chain = request.chain if request.chain.processors else None
        self.P = max(len(r) for r in rows)
        total = self.P + M
        device, dtype = model_device_dtype(model)
        self.kv = None
        if request.cache is not None:
            check_context(spec, self.P, M)
            cache_spec = CacheSpec.for_model(spec, batch_size=B * N, capacity=total, dtype=dtype, device=device)
            self.kv = request.cache(cache_spec)
        # buf, positions: [B*N, P + M]; row b*N + i is beam i of prompt b, prompts left-padded.
        self.buf, self.positions = left_pad([r for r in rows for _ in range(N)], total, device)
        V = spec.vocab_size
        self.stop_mask = torch.zeros(B, V, dtype=torch.bool, device=device)  # [B, V]: True at a stop token
        for b, s in enumerate(stops):
            self.stop_mask[b, [t for t in s if 0 <= t < V]] = True
        # K candidates per prompt: enough that num_beams survive even if every beam's best tokens are stops.
        self.K = min(max(2, 1 + max(len(s) for s in stops)) * N, N * V)
        lens = [len(r) for r in rows for _ in range(N)]
        self.ctx = DecodeContext(
            tokens=self.buf[:, : self.P],
            prompt_lengths=torch.tensor(lens, device=device) if len(set(lens)) > 1 else None,
            generators=None if request.seed is None else row_generators(_beam_seeds(request.seed, N), B * N, device),
        )
        if self.chain is not None:
            self.chain.init_state(self.ctx)
        # running: [B, N] cumulative log-probs; only beam 0 is live at first, so step 0 picks distinct tokens.
        self.running = torch.full((B, N), _NEG_INF, device=device)
        self.running[:, 0] = 0.0
        self.finished = _Finished(
            scores=torch.full((B, N), _NEG_INF, device=device),
            tokens=torch.zeros(B, N, M, dtype=torch.long, device=device),
            lengths=torch.zeros(B, N, dtype=torch.long, device=device),
            valid=torch.zeros(B, N, dtype=torch.bool, device=device),
        )
        # open_rows: [B] prompts whose finished hypotheses may still improve (HF: early-stop heuristic unsatisfied).
        self.open_rows = torch.ones(B, dtype=torch.bool, device=device)

    @torch.no_grad()
    def run(self) -> _Finished:
        P = self.P
        kv = self.kv
        # Prefill: every beam's copy of the prompt in one call.
        if kv is not None:
            logits = self.model(self.buf[:, :P], self.positions[:, :P], kv)[:, -1]
        else:
            logits = uncached_last_logits(self.model, self.buf, self.positions, P)
        for step in range(self.M):
            if self.step(logits, step):
                break
            filled = P + step + 1
            if kv is None:
                logits = uncached_last_logits(self.model, self.buf, self.positions, filled)
            else:
                col = slice(filled - 1, filled)
                logits = self.model(self.buf[:, col], self.positions[:, col], kv)[:, -1]
        return self.finished

    def step(self, logits: Tensor, step: int) -> bool:
        """Extend the beams by one token; True when the search is over."""
        B, N, K, P = self.B, self.N, self.K, self.P
        self.ctx.tokens, self.ctx.step = self.buf[:, : P + step], step
        raw = logits.float()
        logp = torch.log_softmax(raw, -1)  # [B*N, V]
        if self.chain is not None:
            logp = self.chain.process(logp, self.ctx)
        _check_numerics(raw, logp, self.running, step)
        V = logp.shape[-1]
        # The K best (beam, token) continuations of each prompt, by cumulative log-prob.
        cand = (logp.view(B, N, V) + self.running[:, :, None]).view(B, N * V)
        top_scores, top_idx = cand.topk(K, dim=-1)  # [B, K], best first
        src, tok = top_idx // V, top_idx % V  # the beam each extends, and the new token
        hits = self.stop_mask.gather(1, tok)
        if step == self.M - 1:
            hits = torch.ones_like(hits)  # the last step finishes every candidate ("length")

        self._add_finished(top_scores, src, tok, hits, step)
        # Running beams for the next step: the best N candidates that did not finish.
        self.running, keep = torch.where(hits, _NEG_INF, top_scores).topk(N, dim=-1)  # [B, N]
        beam_rows = (src.gather(1, keep) + torch.arange(B, device=src.device)[:, None] * N).flatten()
        self.buf = self.buf.index_select(0, beam_rows)
        self.buf[:, P + step] = tok.gather(1, keep).flatten()
        if self.kv is not None:
            self.kv.reorder(beam_rows)
        self._update_open_rows(step)

        fin = self.finished.valid
        return (
            not bool(self.open_rows.any())
            or (self.early_stopping is True and bool(fin.all()))
            or bool(hits.all())  # no candidate of any prompt can continue
        )

    def _add_finished(self, top_scores: Tensor, src: Tensor, tok: Tensor, hits: Tensor, step: int) -> None:
        """Merge the candidates that just finished into each prompt's N best finished hypotheses."""
        B, N, K, P = self.B, self.N, self.K, self.P
        f = self.finished
        rank = torch.arange(K, device=tok.device)
        # Only the first N candidates may finish (the rest are spares to keep N beams running),
        # only in open prompts, not once a prompt is full under early_stopping=True, and not at -inf.
        eligible = hits & (rank < N) & self.open_rows[:, None] & top_scores.isfinite()
        if self.early_stopping is True:
            eligible &= ~f.valid.all(-1, keepdim=True)
        scores = torch.where(eligible, top_scores / ((step + 1) ** self.length_penalty), _NEG_INF)
        # tokens: [B, K, M] each candidate's generated tokens: its beam's so far, then the new one.
        generated = self.buf[:, P : P + step].view(B, N, step)
        tokens = torch.zeros(B, K, self.M, dtype=torch.long, device=tok.device)
        tokens[:, :, :step] = generated.gather(1, src[:, :, None].expand(B, K, step))
        tokens[:, :, step] = tok

        merged = torch.cat([f.scores, scores], 1)  # [B, N + K]
        best = merged.topk(N, dim=-1).indices  # valid entries are finite, so they all rank first
        f.scores = merged.gather(1, best)
        f.valid = torch.cat([f.valid, eligible], 1).gather(1, best)
        lengths = torch.cat([f.lengths, torch.full_like(tok, step + 1)], 1)
        f.lengths = lengths.gather(1, best)
        f.tokens = torch.cat([f.tokens, tokens], 1).gather(1, best[:, :, None].expand(B, N, self.M))

    def _update_open_rows(self, step: int) -> None:
        """HF's early-stop heuristic: a full prompt closes once its best running beam, at its best
        hypothetical length, cannot beat its worst kept hypothesis; one with no live beam closes too."""
        lp = self.length_penalty
        best_length = self.M if self.early_stopping == "never" and lp > 0 else step + 1
        best_possible = self.running[:, 0] / (best_length**lp)  # running is sorted: beam 0 is the best
        f = self.finished
        can_improve = ~f.valid.all(-1) | (best_possible > f.scores.min(-1).values)
        self.open_rows &= can_improve & self.running[:, 0].isfinite()

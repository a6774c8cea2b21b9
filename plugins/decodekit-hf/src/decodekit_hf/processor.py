"""`as_logits_processor(chain)`: a decodekit chain's processors inside transformers' `generate()`.

transformers calls a `LogitsProcessor` once per generated token with `input_ids` `[B, T]`
(prompt + generated so far) and `scores` `[B, V]`. The processor turns that into a
`DecodeContext`: `tokens=input_ids`, `step = T - T0` where `T0` is the width of `input_ids`
at the first call of the generation, and one `state` dict for the whole generation, so
stateful stages carry their state from token to token.

A call that does not continue the current generation (a different batch size, other prompts, or a width
other than one more than the last call's) starts a new one: the same processor object can
serve successive `generate()` calls. `reset()` forces a new start: a `generate()` continuing the last one's output
is that generation's next step by its `input_ids`. A call that goes back over
tokens the generation has seen, past its prompt, is the same generation (assisted decoding
verifies drafts, then goes on from those it kept): `step` follows it back.

Padding: transformers left-pads a ragged batch with its own pad token, and `input_ids`
holds those pads. Without `prompt_lengths`, every column counts as a real token (so, as with
transformers' own `RepetitionPenaltyLogitsProcessor`, a repetition penalty sees the pad id);
pass `prompt_lengths` (e.g. `attention_mask.sum(-1)`) to mark the pads as padding.

Text: a stage that reads text (a grammar, `needs_tokenizer`) needs `tokenizer=`, the transformers
tokenizer of the model, which the context carries as the decode engine's does.

Selection stays with transformers: `do_sample=False` takes the argmax of the processed
scores, `do_sample=True` draws from their softmax. The chain's selector is not run, so one that picks
otherwise (`distribution` neither "softmax" nor "argmax": mirostat) is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from transformers import LogitsProcessor, PreTrainedTokenizerBase

from decodekit.chain import Chain
from decodekit.context import DecodeContext
from decodekit.errors import ParameterError
from decodekit_hf.tokenizer import HFTokenizer

__all__ = ["ChainLogitsProcessor", "as_logits_processor"]


class ChainLogitsProcessor(LogitsProcessor):  # type: ignore[misc]
    """Runs `chain.processors` on transformers' scores; see the module docstring."""

    def __init__(self, chain: Chain, prompt_lengths: Tensor | None = None, tokenizer: Any = None) -> None:
        self.chain = chain
        self.prompt_lengths = prompt_lengths
        self.tokenizer = tokenizer  # a decodekit tokenizer (`HFTokenizer`), for stages that read text
        self._ctx: DecodeContext | None = None
        self._prompts = torch.empty(0, 0)  # input_ids at the generation's first call [B, T0]

    def reset(self) -> None:
        """Forget the current generation; the next call starts a new one."""
        self._ctx = None

    def _context(self, input_ids: Tensor) -> DecodeContext:
        B, T = input_ids.shape
        ctx = self._ctx
        # A step of this generation is one column wider and has its prompts (a beam search reorders rows only
        # among a prompt's beams); another generate() may happen to have that width.
        if (
            ctx is not None
            and ctx.batch_size == B
            and self._prompt_width + ctx.step + 1 == T
            and self._same_prompts(input_ids)
        ):
            ctx.tokens, ctx.step = input_ids, ctx.step + 1
            return ctx
        if ctx is not None and self._goes_back(ctx, input_ids):
            self._check_stateless(ctx, self._prompt_width + ctx.step + 1 - T)
            ctx.tokens, ctx.step = input_ids, T - self._prompt_width
            return ctx
        lengths = self._lengths(B, T, input_ids.device)
        ctx = DecodeContext(tokens=input_ids, prompt_lengths=lengths, tokenizer=self.tokenizer)
        self.chain.init_state(ctx)
        self._ctx, self._prompts = ctx, input_ids
        return ctx

    @property
    def _prompt_width(self) -> int:
        return self._prompts.shape[1]

    def _same_prompts(self, input_ids: Tensor) -> bool:
        return torch.equal(input_ids[:, : self._prompt_width], self._prompts)

    def _goes_back(self, ctx: DecodeContext, input_ids: Tensor) -> bool:
        """Whether `input_ids` goes back within the current generation: assisted decoding (`prompt_lookup_num_tokens`,
        `assistant_model`) asks at each draft, then again from the drafts it kept, plus one token of its own."""
        B, T = input_ids.shape
        seen = ctx.tokens
        return (
            ctx.batch_size == B
            and self._prompt_width < T <= seen.shape[1]
            and torch.equal(input_ids[:, : T - 1], seen[:, : T - 1])
        )

    def _check_stateless(self, ctx: DecodeContext, back: int) -> None:
        """Refuse going back with a stage that keeps state: it advanced on the drafts generate() then dropped."""
        for stage, state in ctx.state.values():
            if state is not None:
                raise ParameterError(
                    f"as_logits_processor: stage {getattr(stage, 'name', type(stage).__name__)} keeps state across "
                    f"steps, and generate() went back {back} tokens (assisted decoding, prompt_lookup_num_tokens or "
                    "assistant_model, dropped drafts the state had taken); allowed: stages without per-generation "
                    "state, generate() without assisted decoding, or dk.decode(strategy='speculative(...)')"
                )

    def _lengths(self, rows: int, width: int, device: torch.device) -> Tensor | None:
        """`prompt_lengths` on `device`, checked against the generation's first `input_ids` `[rows, width]`."""
        lengths = self.prompt_lengths
        if lengths is None:
            return None
        if lengths.numel() != rows or int(lengths.max()) > width:
            copies = rows // lengths.numel() if lengths.numel() and rows % lengths.numel() == 0 else 1
            hint = (  # generate() repeats each prompt's row for its beams or samples, side by side
                f" (generate() made {copies} rows of each prompt, for num_beams or num_return_sequences: pass "
                f"prompt_lengths=attention_mask.sum(-1).repeat_interleave({copies}))"
                if copies > 1
                else ""
            )
            raise ParameterError(
                f"as_logits_processor: prompt_lengths={lengths.tolist()} is invalid for input_ids of {rows} rows and "
                f"{width} columns; allowed: one length per row, each at most {width}{hint}"
            )
        return lengths.to(device)

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        # The chain's sealed distribution: float32, and a row that cannot be sampled is a NumericsError.
        return self.chain.distribution(scores, self._context(input_ids))


def as_logits_processor(
    chain: Chain | str | Sequence[object], prompt_lengths: Tensor | None = None, *, tokenizer: Any = None
) -> ChainLogitsProcessor:
    """A transformers `LogitsProcessor` running `chain`'s processors, for `generate(logits_processor=[...])`.

    chain: a `Chain`, a chain string (`"repetition_penalty(1.3) | top_k(50)"`) or a spec list.
    prompt_lengths: real prompt tokens per row `[B]`, to tell a left-padded batch's pads apart;
    None treats every column of `input_ids` as a token.
    tokenizer: the model's transformers tokenizer (or a decodekit one, with `token_bytes()`), which a stage
    that reads text (a grammar) needs; a chain with such a stage and no tokenizer is refused.
    """
    if isinstance(chain, str):
        chain = Chain.parse(chain)
    elif isinstance(chain, Sequence):
        chain = Chain.from_spec(list(chain))
    elif not isinstance(chain, Chain):
        raise ParameterError(
            f"as_logits_processor: chain={chain!r} is invalid; allowed: a Chain, a chain string or a spec list"
        )
    _check_selector(chain.selector)
    return ChainLogitsProcessor(chain, _checked_lengths(prompt_lengths), _tokenizer_for(chain, tokenizer))


def _check_selector(selector: object) -> None:
    """Refuse a selector transformers cannot stand in for: it picks by softmax or argmax, so a selector that picks
    otherwise (mirostat's own truncation and state) would be left out silently."""
    if getattr(selector, "distribution", None) not in ("softmax", "argmax"):
        name = getattr(selector, "name", type(selector).__name__)
        raise ParameterError(
            f"as_logits_processor: selector {name} picks by a rule of its own, and transformers picks the token itself "
            "(do_sample=True: a draw from the softmax, False: the argmax), so it would not run; allowed: a chain "
            "ending in sample, gumbel or greedy (or no selector), or decode with dk.generate to use it"
        )


def _tokenizer_for(chain: Chain, tokenizer: object) -> Any:
    """`tokenizer` as a decodekit tokenizer; None is refused, here and not at generate()'s first token, when a
    stage reads text (`needs_tokenizer`)."""
    if tokenizer is None:
        needs = [(i, p) for i, p in enumerate(chain.processors) if getattr(p, "needs_tokenizer", False)]
        if needs:
            i, stage = needs[0]
            raise ParameterError(
                f"as_logits_processor: stage {i} ({getattr(stage, 'name', type(stage).__name__)}) reads text, so it "
                "needs the model's tokenizer; allowed: tokenizer= the transformers tokenizer (or a decodekit "
                "tokenizer with token_bytes())"
            )
        return None
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return HFTokenizer(tokenizer)
    if callable(getattr(tokenizer, "token_bytes", None)) and callable(getattr(tokenizer, "decode", None)):
        return tokenizer
    raise ParameterError(
        f"as_logits_processor: tokenizer={type(tokenizer).__name__} is invalid; allowed: None, a transformers "
        "tokenizer, or a decodekit tokenizer with token_bytes() (HFTokenizer, CharTokenizer)"
    )


def _checked_lengths(lengths: object) -> Tensor | None:
    """`prompt_lengths` as given, if it is None or a 1-D integer tensor of counts >= 0."""
    if lengths is None:
        return None
    if (
        isinstance(lengths, Tensor)
        and lengths.dim() == 1
        and not (lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool)
        and (lengths.numel() == 0 or int(lengths.min()) >= 0)
    ):
        return lengths
    shown = lengths.tolist() if isinstance(lengths, Tensor) else lengths
    raise ParameterError(
        f"as_logits_processor: prompt_lengths={shown!r} is invalid; allowed: None, or a 1-D integer tensor of the "
        "real prompt tokens of each row (e.g. attention_mask.sum(-1))"
    )

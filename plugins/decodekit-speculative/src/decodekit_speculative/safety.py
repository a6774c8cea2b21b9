"""Which chains can be speculated: what the rule needs from each stage, checked before decoding starts.

The rejection rule needs the chain's distribution as numbers at every drafted position. The
strategy hands every processor exactly the history (tokens, step) it would see without
speculation, so a processor is safe when its output depends only on its inputs: any processor
without per-generation state. A stage that keeps state across steps (`init_state` returns
something, like mirostat_v2's mu) would see positions that are later rolled back: refused. The
selector must declare what it picks from (`SelectorBase.distribution`): "softmax" (`sample`,
`gumbel`) or "argmax" (`greedy`); any other is refused.
"""

from __future__ import annotations

from typing import Literal

from decodekit.chain import Chain
from decodekit.context import DecodeContext
from decodekit.errors import ParameterError

__all__ = ["Kind", "speculation_kind"]

Kind = Literal["softmax", "argmax"]


def _label(stage: object) -> str:
    """How a chain string writes the stage: `name(k=v)`, `name` without parameters."""
    params = getattr(stage, "params", None)
    if params is None:
        return getattr(stage, "__name__", repr(stage))
    args = ", ".join(f"{k}={v!r}" for k, v in params.model_dump().items())
    return f"{getattr(stage, 'name', type(stage).__name__)}({args})" if args else str(getattr(stage, "name", stage))


def speculation_kind(chain: Chain, ctx: DecodeContext) -> Kind:
    """What the chain's selector picks from; raises `ParameterError` naming a stage that cannot be speculated.

    `ctx` is a context of the generation, used to create (and look at) each stage's state.
    """
    for stage in chain.processors:
        init_state = getattr(stage, "init_state", None)
        if init_state is not None and ctx.state_for(stage) is not None:
            raise ParameterError(
                f"speculative: chain stage {_label(stage)} keeps state across steps, which speculation would "
                "advance on drafted tokens that are then rejected; allowed: stages without per-generation state"
            )
    selector = chain.selector
    kind = getattr(selector, "distribution", None)
    if kind not in ("softmax", "argmax") or (hasattr(selector, "init_state") and ctx.state_for(selector) is not None):
        raise ParameterError(
            f"speculative: selector {_label(selector)} does not declare the distribution it picks from "
            f"(distribution={kind!r}) or keeps state across steps; allowed: a stateless selector with "
            "distribution 'softmax' (sample, gumbel) or 'argmax' (greedy)"
        )
    return kind  # type: ignore[no-any-return]

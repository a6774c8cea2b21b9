"""The parameter model of the `cfg` strategy (pydantic only, so listing strategies imports no torch)."""

from __future__ import annotations

from pydantic import Field

from decodekit.params import Params

__all__ = ["GuidanceParams", "Negative"]

Negative = str | list[str] | list[int] | list[list[int]] | None
"""A negative prompt: text or token ids for every prompt, or a list of them, one per prompt."""

NEGATIVE_ALLOWED = "None, text or a list of token ids (for every prompt), or a list of them (one per prompt)"
"""What `negative` allows, as the listing and the errors write it."""


class GuidanceParams(Params):
    """The options of classifier-free guidance besides those every strategy shares (transformers' names:
    `guidance_scale`, `negative_prompt_ids`)."""

    scale: float = Field(
        default=1.5,
        ge=-1e4,  # far past any useful guidance; from ~1e37 the guided scores overflow to +inf (nothing to pick)
        le=1e4,
        allow_inf_nan=False,
        description="guided = scale * (cond - uncond) + uncond, on log-probabilities; 1: no guidance, "
        "> 1 further from the negative prompt, < 1 towards it",
    )
    negative: Negative = Field(
        default=None,
        description="the unconditional prompt: text or token ids for all prompts, or one per prompt; "
        "None: each prompt's last token",
        json_schema_extra={"allowed": NEGATIVE_ALLOWED},
    )

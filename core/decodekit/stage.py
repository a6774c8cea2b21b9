"""Base classes for samplers, processors (`[B, V] -> [B, V]`) and selectors (`[B, V] -> [B]`): a name and validated
parameters; their optional candidate fast path is docs/plugins.md's "The candidate fast path (optional)"."""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NamedTuple, TypeVar, cast

import torch
from torch import Tensor

from decodekit.errors import ParameterError
from decodekit.params import NoParams, Params, validate_params

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Candidates", "ProcessorBase", "SelectorBase", "Stage", "densify"]

P = TypeVar("P", bound=Params)


class Candidates(NamedTuple):
    """The tokens a truncation kept; every other token is -inf.

    values: [B, K] logits, sorted descending within each row (-inf entries last); a row of NaN
        is one the set could not hold, which the chain redoes densely
    indices: [B, K] their token ids
    """

    values: Tensor
    indices: Tensor


def densify(c: Candidates, vocab_size: int) -> Tensor:
    """The `[B, V]` logits a candidate set stands for."""
    out = torch.full((c.values.shape[0], vocab_size), float("-inf"), dtype=c.values.dtype, device=c.values.device)
    return out.scatter_(1, c.indices, c.values)


class Stage(Generic[P]):
    """A named sampler stage with validated parameters: name and kind from its registration, `params_model` from its
    type argument, `ProcessorBase[TopKParams]` (docs/plugins.md, "The hooks"); an unregistered class may set both."""

    params_model: ClassVar[type[Params]] = NoParams
    kind: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "params_model" in cls.__dict__:
            return
        for base in getattr(cls, "__orig_bases__", ()):
            (model, *_) = typing.get_args(base) or (None,)
            if isinstance(model, type) and issubclass(model, Params):
                cls.params_model = model
                return

    @property
    def name(self) -> str:
        """The registered name of this stage's class, else the class's own name in snake case."""
        from decodekit.plugins import registered_name

        return registered_name(type(self))

    def __init__(self, params: P | None = None, /, **kwargs: Any) -> None:
        if params is not None and kwargs:
            raise ParameterError(
                f"{self.name}: params={params!r} and keyword parameters {sorted(kwargs)} are invalid together; "
                "allowed: one of them"
            )
        if params is None:
            params = cast(P, validate_params(self.name, self.params_model, kwargs))
        elif not isinstance(params, self.params_model):
            raise ParameterError(
                f"{self.name}: params of type {type(params).__name__} is invalid; allowed: a "
                f"{self.params_model.__name__}, or keyword parameters"
            )
        self.params: P = params

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable description: `{"name": ..., "params": {...}}`."""
        return {"name": self.name, "params": self.params.model_dump(mode="json")}

    def init_state(self, ctx: DecodeContext) -> Any:
        """Per-generation state of a stateful stage (see `DecodeContext.state_for`); None if stateless."""
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{self.name}({args})"


class ProcessorBase(Stage[P]):
    """A registered processor: `logits [B, V] -> logits [B, V]`, pure, -inf means removed."""

    kind: ClassVar[str] = "processor"

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        raise NotImplementedError


class SelectorBase(Stage[P]):
    """A registered selector: `logits [B, V] -> token ids LongTensor [B]`, any id in range on a row that cannot be
    sampled (the chain marks it). `distribution`: what it draws from, for speculative decoding (docs/speculative.md)."""

    kind: ClassVar[str] = "selector"
    distribution: ClassVar[Literal["softmax", "argmax"] | None] = None

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        raise NotImplementedError

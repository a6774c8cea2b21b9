"""Base classes for samplers: processors (`[B, V] -> [B, V]`) and selectors (`[B, V] -> [B]`).

Any callable with the right signature can stand in a chain; these bases add what the
registry, specs and the chain's fast path need: a name, validated parameters, and
optional candidate-set methods.

The candidate fast path: once a truncation (top-k, top-p, ...) has kept a few tokens,
the rest of the chain need not touch the whole vocabulary. A stage may offer
  - `to_candidates(logits, ctx) -> Candidates | None`: its own result as a candidate set
    (None: not cheaply possible this time; the chain then calls it densely);
  - `on_candidates(c, ctx) -> Candidates`: its result on logits that are -inf outside `c`;
  - (selectors) `select_candidates(c, ctx) -> LongTensor [B]`.
Each must agree exactly with the dense `__call__`; the conformance kit checks it.

A monotone map ahead of a rank truncation: a processor whose call is one non-decreasing
function f applied to every logit (temperature: x / T) may offer
  - `monotone_map(ctx) -> Callable[[Tensor], Tensor] | None`: f, computing each element
    exactly as it would in the whole tensor (true of +, -, *, / by a number); None when not
    this time;
and a truncation whose kept set depends only on the order of the logits (top-k) may offer
  - `to_candidates_after(logits, f, ctx) -> Candidates | None`: its candidates on f(logits),
    with f applied to the kept tokens only (None: not this time; the chain then runs both).
When the first stands right before the second, the chain runs the pair as one.

The in-place form: a processor may offer `process_(logits, ctx) -> Tensor`, its result
written into `logits` and `logits` returned. A stage that offers it promises that its
`__call__` returns either its input itself or a new tensor sharing no memory with anything.
The chain calls `process_` only on a tensor it owns: one an earlier stage made, or the
caller's logits when the caller hands them over (`Chain.select(..., consume=True)`, as the
decode loop does with the model's fresh logits). An in-place form must not turn a non-NaN
logit into NaN (the decode loop's diagnosis of a NaN row relies on it). The kit checks
both forms agree and that the out-of-place result is fresh.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NamedTuple, TypeVar, cast

import torch
from torch import Tensor

from decodekit.params import NoParams, Params, validate_params

if TYPE_CHECKING:
    from decodekit.context import DecodeContext

__all__ = ["Candidates", "Constants", "ProcessorBase", "SelectorBase", "Stage", "constant", "densify"]

P = TypeVar("P", bound=Params)


class Candidates(NamedTuple):
    """The tokens a truncation kept; every other token is -inf.

    values: [B, K] logits, sorted descending within each row (-inf entries last)
    indices: [B, K] their token ids
    """

    values: Tensor
    indices: Tensor


_CONSTANT_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32)


@lru_cache(maxsize=256)
def _constant(value: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    with torch.inference_mode(False):  # a normal tensor: usable with autograd too
        return torch.full((), value, dtype=dtype, device=device)


def constant(value: float, like: Tensor) -> Tensor | float:
    """`value` as a cached 0-dim tensor of `like`'s dtype and device, for use in place of a
    Python number in a per-step op (`x / constant(T, x)`).

    PyTorch turns a Python number operand into a tensor on every call (three more dispatched
    ops: wrap, convert, copy); a 0-dim tensor of the same dtype computes the same values.
    For half-precision `like` (where a kernel reads a Python number in float32 but a 0-dim
    half tensor in half precision) the number itself is returned.
    """
    if like.dtype in _CONSTANT_DTYPES:
        return _constant(value, like.dtype, like.device)
    return value


class Constants:
    """Numbers a stage uses in every step, as `constant`s of the tensor it meets: one lookup per
    step for all of them (`zero, penalty = self._constants.like(x)`), not one cached call each.

    Keeps the last dtype and device it was asked for; another one builds the tensors again.
    """

    __slots__ = ("_cache", "values")

    def __init__(self, *values: float) -> None:
        self.values = values
        self._cache: tuple[tuple[torch.dtype, torch.device], tuple[Tensor | float, ...]] | None = None

    def like(self, x: Tensor) -> tuple[Tensor | float, ...]:
        key = (x.dtype, x.device)
        cache = self._cache  # read once: another thread may replace it (whole, never in part)
        if cache is None or cache[0] != key:
            cache = self._cache = (key, tuple(constant(v, x) for v in self.values))
        return cache[1]


def densify(c: Candidates, vocab_size: int) -> Tensor:
    """The `[B, V]` logits a candidate set stands for."""
    out = torch.full((c.values.shape[0], vocab_size), float("-inf"), dtype=c.values.dtype, device=c.values.device)
    return out.scatter_(1, c.indices, c.values)


class Stage(Generic[P]):
    """A named sampler stage with validated parameters (`params_model`)."""

    name: ClassVar[str]
    params_model: ClassVar[type[Params]] = NoParams
    kind: ClassVar[str]

    def __init__(self, params: P | None = None, /, **kwargs: Any) -> None:
        if params is not None and kwargs:
            raise TypeError(f"{self.name}: pass a params model or keyword parameters, not both")
        if params is None:
            params = cast(P, validate_params(self.name, self.params_model, kwargs))
        elif not isinstance(params, self.params_model):
            raise TypeError(f"{self.name}: params must be a {self.params_model.__name__}, got {type(params).__name__}")
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
    """A registered selector: `logits [B, V] -> token ids LongTensor [B]`.

    `marks_unsampleable = True` promises that the selector itself returns -1 for a row that
    cannot be sampled (a NaN logit, +inf, or every token removed), on the dense call and on
    `select_candidates`; the chain then skips its own check. The conformance kit tests the promise.

    `distribution` says what the selector picks from, for strategies that need it as numbers
    (speculative decoding's rejection rule): "softmax", an exact categorical draw from
    softmax(logits); "argmax", the first maximum. None (the default): unknown, and such a
    selector (a stateful one like mirostat, say) cannot be speculated.
    """

    kind: ClassVar[str] = "selector"
    marks_unsampleable: ClassVar[bool] = False
    distribution: ClassVar[Literal["softmax", "argmax"] | None] = None

    def __call__(self, logits: Tensor, ctx: DecodeContext) -> Tensor:
        raise NotImplementedError

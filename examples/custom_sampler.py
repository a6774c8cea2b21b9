"""A third-party sampler in a few lines: use it in a chain in code, then register it by name.

python examples/custom_sampler.py
"""

from __future__ import annotations

import torch
from decodekit_gpt.gpt import GPT, GPTConfig
from pydantic import Field

import decodekit as dk
from decodekit.hookspecs import SamplerRegistrar


# 1. Any callable `(logits [B, V], ctx) -> logits [B, V]` is a processor: no registration needed.
def no_token_zero(logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
    return logits.index_fill(1, torch.tensor([0], device=logits.device), float("-inf"))


# 2. A named sampler with validated parameters: Gemma-style logit soft-capping, cap · tanh(x / cap).
class SoftcapParams(dk.Params):
    # le: a cap past float32's range is inf there, and inf * tanh(logits / inf) is NaN
    cap: float = Field(default=30.0, gt=0, le=10_000, description="logits are squashed into (-cap, cap)")


class Softcap(dk.ProcessorBase[SoftcapParams]):
    def __call__(self, logits: torch.Tensor, ctx: dk.DecodeContext) -> torch.Tensor:
        capped = torch.tanh(logits / self.params.cap) * self.params.cap
        return torch.where(logits == float("-inf"), logits, capped)  # removed tokens stay removed


# 3. Registered with a hookimpl, the same way a pip-installable plugin does it from its entry point.
class SoftcapPlugin:
    @dk.hookimpl
    def register_samplers(self, register: SamplerRegistrar) -> None:
        register("softcap", Softcap, SoftcapParams, "Soft-cap logits: cap · tanh(logits / cap)")


def main() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, n_kv_head=2, n_embd=64)).eval()
    prompt = [[72, 101, 108, 108, 111]]

    in_code = dk.Chain([no_token_zero, Softcap(cap=5.0)], selector=dk.create("sample"))
    a = dk.generate(model, prompt, chain=in_code, max_new_tokens=16, seed=0)
    print("in code:     ", in_code, "->", a.tokens[0])

    dk.register_plugin(SoftcapPlugin(), name="softcap-example")
    by_name = dk.Chain.parse("softcap(5.0) | sample")
    b = dk.generate(model, prompt, chain=by_name, max_new_tokens=16, seed=0)
    print("by name:     ", by_name, "->", b.tokens[0])
    print("spec:        ", by_name.to_spec())
    try:
        dk.create("softcap", cap=-1)
    except dk.ParameterError as exc:
        print("bad value:   ", exc)


if __name__ == "__main__":
    main()

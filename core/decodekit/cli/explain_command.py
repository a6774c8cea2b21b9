"""`decodekit explain`: run `explain_steps`, then print tables or JSON and draw the optional plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from decodekit.cli.errors import CliError
from decodekit.cli.json_output import print_json
from decodekit.cli.options import (
    build_chain,
    check_installed,
    encode_prompt,
    load_named_model,
    model_name,
    resolve_cache,
)

__all__ = ["ExplainRequest", "run_explain"]


@dataclass(frozen=True)
class ExplainRequest:
    """The options of `decodekit explain`, as given."""

    prompt: str
    model: str | None
    chain: str | None
    flags: dict[str, float | int | None]
    steps: int
    top: int
    seed: int | None
    plot: Path | None
    plot_step: int
    json_output: bool
    cache: str | None = None
    replace_unknown: bool = False


def run_explain(request: ExplainRequest) -> int:
    """Run the command; return its exit status."""
    if request.plot is not None:
        if request.plot_step >= request.steps:
            raise CliError(f"--plot-step {request.plot_step}: allowed: 0 <= step < --steps ({request.steps})")
        from decodekit.cli.explain_render import check_plot_path

        check_plot_path(request.plot)
    check_installed(request.model, request.chain, request.flags)
    cache = resolve_cache(request.cache)
    name = model_name(request.model)
    chain = build_chain(request.chain, request.flags)
    from decodekit.cli.explain import explain_steps, stage_label
    from decodekit.cli.explain_render import plot_step, render_steps, steps_json

    model = load_named_model(name)
    prompt = encode_prompt(model, request.prompt, request.replace_unknown)
    reports = explain_steps(model, prompt, chain, steps=request.steps, top=request.top, seed=request.seed, cache=cache)
    if request.json_output:
        header = {"model": name, "prompt": request.prompt, "chain": str(chain), "cache": cache, "seed": request.seed}
        print_json(steps_json(reports, **header))
    else:
        console = Console()
        stages = " | ".join(stage_label(s) for s in (*chain.processors, chain.selector))
        console.print(Text.assemble(("model ", "bold"), name, ("   chain ", "bold"), stages))
        render_steps(console, reports, request.top)
    if request.plot is not None:
        plot_step(reports[request.plot_step], request.plot)
        if not request.json_output:
            Console(stderr=True).print(Text(f"wrote {request.plot}"))
    return 0

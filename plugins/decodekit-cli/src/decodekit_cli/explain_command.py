"""`decodekit explain`: run `explain_steps`, then print tables or JSON and draw the optional plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from decodekit_cli.console import stdout_console
from decodekit_cli.errors import CliError
from decodekit_cli.json_output import print_json
from decodekit_cli.options import build_chain, cli_hints, prompt_text
from decodekit_cli.sampling_options import SamplingOptions, eos_tokens

__all__ = ["ExplainRequest", "run_explain"]


@dataclass(frozen=True)
class ExplainRequest:
    """The options of `decodekit explain`, as given."""

    prompt: str
    sampling: SamplingOptions  # max_new_tokens: the steps traced
    top: int
    plot: Path | None
    plot_step: int
    json_output: bool

    @property
    def steps(self) -> int:
        return self.sampling.max_new_tokens


def run_explain(request: ExplainRequest) -> int:
    """Run the command; return its exit status."""
    if request.plot is not None:
        if request.plot_step >= request.steps:
            raise CliError(f"--plot-step {request.plot_step}: allowed: 0 <= step < --steps ({request.steps})")
        from decodekit_cli.explain_render import check_plot_path

        check_plot_path(request.plot)
    sampling = request.sampling.seeded()
    name, cache = sampling.check()
    chain = build_chain(sampling.chain_text(), sampling.chain)
    text = prompt_text(request.prompt)  # "-" reads stdin, as generate does
    from decodekit.chain import stage_label
    from decodekit_cli.explain import explain_steps
    from decodekit_cli.explain_render import ended_text, plot_step, render_steps, steps_json

    model = sampling.load_model(name)
    prompt = sampling.encode(model, text)
    length = len(prompt)  # a checkpoint's min_length counts the prompt
    own = sampling.model_settings(model, "sample", length)  # explain traces the chain alone, over --steps
    chain = chain if own.chain is None else build_chain(own.chain)
    text = sampling.seen_prompt(model, text, prompt)
    with cli_hints(length_option="--steps"):
        # The steps generate would take: it ends at the model's EOS too (the last step says so), unless --ignore-eos.
        stop_tokens = eos_tokens(model, sampling.ignore_eos)
        reports = explain_steps(
            model,
            prompt,
            chain,
            steps=request.steps,
            top=request.top,
            seed=sampling.seed,
            cache=cache,
            stop_tokens=stop_tokens,
        )
    if request.plot is not None and request.plot_step >= len(reports):  # the row ended before it (a grammar)
        raise CliError(
            f"--plot-step {request.plot_step}: the decode ended after {len(reports)} steps (stopped by "
            f"{ended_text(reports[-1])}); allowed: 0 <= step < {len(reports)}"
        )
    # the tables' and plot's, parameters at their defaults left out; --json: the chain's
    short = ["input", *(stage_label(s, every=False) for s in chain.processors)]
    if request.json_output:
        header = {"model": name, "prompt": text, "chain": str(chain), "cache": cache, "seed": sampling.seed}
        header["ignore_eos"] = sampling.ignore_eos  # beside the other settings, as generate --json records it
        print_json(steps_json(reports, **header))
    else:
        console = stdout_console()
        stages = " | ".join(stage_label(s, every=False) for s in (*chain.processors, chain.selector))
        console.print(Text.assemble(("model ", "bold"), name, ("   chain ", "bold"), stages))
        render_steps(console, reports, request.top, short)
    if request.plot is not None:
        plot_step(reports[request.plot_step], request.plot, short)
        if not request.json_output:
            Console(stderr=True).print(Text(f"wrote {request.plot}"))
    return 0

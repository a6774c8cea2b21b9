"""`--ray [ADDRESS]`: an option whose value may be left out.

Click options take a value or none, never both, so a bare `--ray` (at the end, or before another
option) is rewritten to `--ray=local` before the command line is parsed.
"""

from __future__ import annotations

__all__ = ["LOCAL", "bare_ray_flag"]

LOCAL = "local"  # start Ray in this process (or join $RAY_ADDRESS)


def bare_ray_flag(args: list[str]) -> list[str]:
    """`args` with a bare `--ray` given its default address."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":  # what follows is an argument, never an option
            break
        if arg == "--ray" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = f"--ray={LOCAL}"
    return out

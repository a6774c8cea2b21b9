"""Where an `hf` model's weights go: a device string torch can use here, or a `ParameterError` saying what is."""

from __future__ import annotations

import torch

from decodekit.errors import ParameterError

__all__ = ["available_devices", "torch_device"]


def available_devices() -> list[str]:
    """The devices torch can use in this process, as `hf(device=...)` spells them."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def torch_device(device: str) -> torch.device:
    """`device` (already of the form cpu, cuda, cuda:N or mps) as a `torch.device`, if torch can use it here."""
    available = available_devices()
    if device not in available:
        raise ParameterError(
            f"model hf: device={device!r} is not available here (torch {torch.__version__}); "
            f"allowed: {', '.join(available)}"
        )
    return torch.device(device)

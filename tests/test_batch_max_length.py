"""A batch line past a checkpoint's `max_length` (which counts the prompt) is refused saying how long a prompt fits."""

from __future__ import annotations

import pytest
from decodekit_cli.batch_decode import _default_length
from decodekit_cli.batch_settings import BatchSettings
from decodekit_cli.errors import CliError


def test_a_line_past_the_models_max_length_says_how_long_a_prompt_fits() -> None:
    """It said "allowed: a shorter prompt": how much shorter was left to work out."""
    settings = BatchSettings(model="m", chain="sample", max_new_tokens=9, seed=0, cache="none", max_length=4)
    assert _default_length(settings, [1, 2, 3]) == 1  # 4 less the prompt's 3: the longest prompt that fits
    with pytest.raises(CliError) as info:
        _default_length(settings, [1, 2, 3, 4])
    assert str(info.value) == (
        "the model's max_length=4 counts the prompt, and this prompt has 4 tokens, so nothing is left to generate; "
        "allowed: a prompt of at most 3 tokens, or the line's own max_new_tokens (or --max-new-tokens N for every line)"
    )

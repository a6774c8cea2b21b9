"""Code run in a fresh interpreter, for what importing it costs: a module loaded in this one stays loaded."""

from __future__ import annotations

import subprocess
import sys


def loads_the_compiler(code: str) -> bool:
    """Whether `code`, run alone, leaves torch's compiler (`torch._dynamo`, ~1 s to import) imported."""
    check = f"{code}\nimport sys\nprint('torch._dynamo' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1] == "True"

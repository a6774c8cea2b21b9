"""JSON on stdout: indented objects, with flat lists (token ids, probabilities) kept on one line."""

from __future__ import annotations

import json

__all__ = ["format_json", "print_json"]


def format_json(value: object, indent: int = 0) -> str:
    """`json.dumps(value, indent=2)`, except that a list of scalars stays on one line."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        items = [f"{pad}  {json.dumps(str(k))}: {format_json(v, indent + 2)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
        items = [f"{pad}  {format_json(v, indent + 2)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False, default=repr)


def print_json(value: object) -> None:
    print(format_json(value))

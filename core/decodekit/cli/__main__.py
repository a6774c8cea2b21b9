"""`python -m decodekit.cli`: the same as the `decodekit` command."""

from __future__ import annotations

from decodekit.cli import main

raise SystemExit(main())

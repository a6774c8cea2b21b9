"""`python -m decodekit_cli`: the same as the `decodekit` command."""

from __future__ import annotations

from decodekit_cli import main

raise SystemExit(main())

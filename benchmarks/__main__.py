"""``python -m benchmarks``: see :mod:`benchmarks.runner`."""

from __future__ import annotations

from .runner import main

raise SystemExit(main())

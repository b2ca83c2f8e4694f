"""``python3 -m tests.hosts.nspawn ...``: see :mod:`tests.hosts.nspawn.cli`."""

import sys

from .cli import main

sys.exit(main())

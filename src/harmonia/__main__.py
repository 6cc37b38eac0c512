"""``python -m harmonia``: the command line (see :mod:`harmonia._cli`)."""

from __future__ import annotations

import sys

from ._cli.main import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m harmonia.agent``: ``harmonia chat`` on its own (see ``_chat_cli``)."""

from __future__ import annotations

import sys

from ._chat_cli import main

if __name__ == "__main__":
    sys.exit(main())

"""The console commands print their tables on.

Rich assumes 80 columns when output is not a terminal (a file, a pipe, a CI log) and then cuts
wide tables' numbers to "15.…"; a non-terminal console gets room for every column instead.
"""

from __future__ import annotations

import sys

from rich.console import Console


def stdout_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 240)

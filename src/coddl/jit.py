"""Compiled loops: numba's ``njit``, its machine code cached wherever this process may write.

numba caches compiled code beside the source (``__pycache__``) and, failing that, in the user's cache
directory; ``cache=True`` raises at import when neither is writable. That is the case for a read-only
installation run by an account without a writable home: a system account that runs the server, or a
confined job. Then the cache moves to a directory this user owns (``$XDG_CACHE_HOME``/``~/.cache``, or
one under the temporary directory, made 0700). numba loads what it finds there as code, so a
directory another user could have planted or may write is never used: the functions are then compiled
at every start instead (seconds slower, never wrong). ``NUMBA_CACHE_DIR``, when set, is respected.
"""

from __future__ import annotations

import os
import stat
import tempfile
from functools import partial
from pathlib import Path

import numba
from numba.core import config

_SOURCE = Path(__file__).resolve().parent


def _own_private_dir(path: Path) -> bool:
    """``path`` exists or is created as a directory of this user's that no one else may write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def cache_location() -> str | None:
    """Where compiled code is cached: "" for numba's own choice (beside the source, or the
    user-provided ``NUMBA_CACHE_DIR``), a directory, or None for no cache at all."""
    if config.CACHE_DIR or os.access(_SOURCE, os.W_OK):
        return ""
    home = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache" if os.environ.get("HOME") else None)
    for base in ([Path(home) / "coddl"] if home else []) + [Path(tempfile.gettempdir()) / f"coddl-{os.geteuid()}"]:
        if (os.access(base.parent, os.W_OK) or _exists(base)) and _own_private_dir(base) \
                and _own_private_dir(base / "numba"):
            return str(base / "numba")
    return None


def _exists(path: Path) -> bool:
    """``path.exists()``, but False where this user may not even look (a ``HOME`` inherited from root:
    ``Path.exists`` raises for that, and importing coddl must not)."""
    try:
        return path.exists()
    except OSError:
        return False


_WHERE = cache_location()
if _WHERE:
    config.CACHE_DIR = _WHERE

njit = partial(numba.njit, cache=_WHERE is not None)
"""``numba.njit`` with caching where it is possible (see the module's docstring)."""

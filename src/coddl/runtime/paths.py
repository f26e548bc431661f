"""Where the real system keeps its state, and the defaults a client falls back on (a module of its
own so that the CLI's client commands do not import the server)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 8470
CLIENT_FILE = "client.json"  # server URL + token for the CLI (mode 0600)
SERVER_FILE = "server.json"  # where the running server listens, and its pid
LOCK_FILE = "server.lock"  # flock'ed by the running server for its whole life (holds its pid)


def default_state_dir() -> Path:
    return Path(os.environ.get("CODDL_STATE_DIR") or Path.home() / ".coddl")

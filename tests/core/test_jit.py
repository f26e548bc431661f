"""Where compiled code is cached when coddl's own directory is read-only: a directory of this user's that
no one else may write, never one another account planted (numba would load its files as code)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from coddl import jit


@pytest.fixture
def read_only_install(monkeypatch, tmp_path) -> Path:
    """As if coddl were installed where this process may not write (root may write anywhere); the
    temporary directory it falls back to."""
    real = os.access
    monkeypatch.setattr(jit.os, "access", lambda p, mode: False if Path(p) == jit._SOURCE else real(p, mode))
    monkeypatch.setattr(jit.config, "CACHE_DIR", "")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(jit.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    return tmp_path / "tmp"


def test_a_writable_install_caches_beside_the_source(monkeypatch):
    monkeypatch.setattr(jit.config, "CACHE_DIR", "")
    monkeypatch.setattr(jit.os, "access", lambda p, mode: True)
    assert jit.cache_location() == ""


def test_a_read_only_install_caches_in_the_users_own_cache(read_only_install, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    where = Path(jit.cache_location())
    assert where == tmp_path / "cache" / "coddl" / "numba"
    assert stat.S_IMODE(where.stat().st_mode) == 0o700 and stat.S_IMODE(where.parent.stat().st_mode) == 0o700


def test_without_a_writable_home_the_cache_is_a_private_temporary_directory(read_only_install, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "nowhere" / "deeper"))  # its parent does not exist
    where = Path(jit.cache_location())
    assert where == read_only_install / f"coddl-{os.geteuid()}" / "numba"
    assert stat.S_IMODE(where.parent.stat().st_mode) == 0o700


def test_a_planted_directory_is_never_used(read_only_install, monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    planted = read_only_install / f"coddl-{os.geteuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # anyone may write into it, or (below, as root) another account owns it
    if os.geteuid() == 0:
        os.chown(planted, 65534, 65534)
    assert jit.cache_location() is None  # compiled at every start instead


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second account")
def test_a_home_the_account_may_not_look_into_does_not_break_the_import(tmp_path):
    """An account started with root's HOME (setpriv, sudo without -H): ``Path.exists`` raises there."""
    import subprocess
    import sys

    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    tmp_path.chmod(0o755)
    setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "env", f"HOME={private}",
               f"PYTHONPATH={os.pathsep.join(p for p in sys.path if p)}", "XDG_CACHE_HOME="]
    probe = subprocess.run([*setpriv, "/usr/bin/python3", "-c", "import numba"], capture_output=True, cwd="/")
    if probe.returncode != 0:
        pytest.skip("the second account cannot import numba from this installation")
    r = subprocess.run([*setpriv, "/usr/bin/python3", "-c", "from coddl import jit; print(jit._WHERE)"],
                       capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "coddl-65534" in r.stdout or r.stdout.strip() in ("", "None"), r.stdout

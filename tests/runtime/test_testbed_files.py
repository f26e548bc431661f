"""The testbed's files in a directory every user may write (/tmp): its Ray token and Ray's session
directory each in a directory of root's own, and its state file root's own file. Another local user
who made one of those names first — a directory, a file or a link — must neither read the token nor
have root write through a planted link; ``up`` refuses instead, naming the path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from coddl.runtime.testbed import cluster
from coddl.runtime.testbed.netns import TestbedError

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's files are made with chown")


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for /tmp: sticky and writable by everyone."""
    root = tmp_path / "tmp"
    root.mkdir()
    os.chmod(root, 0o1777)
    monkeypatch.setattr(cluster, "STATE_ROOT", root)
    return root


def test_the_token_is_written_into_a_directory_only_root_enters(tmp_root: Path) -> None:
    cluster._write_token("tb")
    token = tmp_root / "tb-auth" / "token"
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700 and token.parent.stat().st_uid == 0
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) == 64
    first = token.read_text()
    cluster._write_token("tb")  # again over an earlier testbed's own files: a new token
    assert token.read_text() != first and stat.S_IMODE(token.stat().st_mode) == 0o600


def test_a_token_directory_another_user_made_first_is_refused(tmp_root: Path) -> None:
    planted = tmp_root / "tb-auth"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)
    os.chown(planted, NOBODY, NOBODY)
    (planted / "token").touch(mode=0o666)
    os.chown(planted / "token", NOBODY, NOBODY)
    with pytest.raises(TestbedError, match=rf"^{planted} exists and is not a private directory of this user"):
        cluster._write_token("tb")
    assert (planted / "token").read_text() == ""  # nothing written where the other user can read it
    assert planted.stat().st_uid == NOBODY and stat.S_IMODE(planted.stat().st_mode) == 0o777


def test_a_link_by_the_token_directory_s_name_is_refused(tmp_root: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_root / "tb-auth").symlink_to(target)
    with pytest.raises(TestbedError, match="is not a private directory of this user"):
        cluster._write_token("tb")
    assert list(target.iterdir()) == []


def test_root_s_own_directory_opened_to_others_is_refused_not_reused(tmp_root: Path) -> None:
    (tmp_root / "tb-ray").mkdir(mode=0o755)
    os.chmod(tmp_root / "tb-ray", 0o755)
    with pytest.raises(TestbedError, match="tb-ray exists and is not a private directory"):
        cluster._private_dir(tmp_root / "tb-ray")


def test_the_state_file_is_never_written_through_a_planted_link(tmp_root: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's own\n")
    link = cluster.state_file("tb")
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(TestbedError, match=rf"^{link} exists and is not this user's file"):
        cluster._write_own(link, "{}", 0o644)
    assert victim.read_text() == "root's own\n"


def test_a_state_file_another_user_planted_is_neither_overwritten_nor_trusted(tmp_root: Path) -> None:
    planted = cluster.state_file("tb")
    planted.write_text('{"spec": {}}')
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(TestbedError, match="is not this user's file"):
        cluster._write_own(planted, "{}", 0o644)
    with pytest.raises(TestbedError, match="is not this user's file"):
        cluster.load("tb")


def test_root_s_own_state_file_is_replaced_and_read_back(tmp_root: Path) -> None:
    path = cluster.state_file("tb")
    cluster._write_own(path, "old", 0o644)
    cluster._write_own(path, "new", 0o644)
    assert cluster._read_own(path) == "new" and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_state_file_that_is_a_link_is_not_followed_when_read(tmp_root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"spec": {}}')
    cluster.state_file("tb").symlink_to(elsewhere)
    with pytest.raises(TestbedError, match="is a link, not this user's file"):
        cluster.load("tb")

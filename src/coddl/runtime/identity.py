"""Which Unix account runs a coddl user's jobs, when the server runs as root.

A coddl user is a name on an API token; nothing ties it to an account on the machine. The operator
may map users to existing accounts in the state directory's ``accounts.yaml``::

    # coddl user: Unix account
    alice: alice
    bob: bob

and then alice's jobs run as alice, with exactly her file permissions (her data, her home), as on a
Slurm cluster. Every user not in the file gets a dedicated, unprivileged account of their own that
the server creates on first use (``useradd --system``, no home, no login shell): ``coddl-NAME`` for
a name of lowercase letters, digits and ``_`` (``coddl-alice``), and ``coddl-PREFIX-HASH`` for any
other name (``Alice`` → ``coddl-alice-5f3c...``), so that two users never share an account. A
dedicated account carries a marker in its comment field; an account of that name that the server did
not create for that user is never used. No job ever runs as uid 0: mapping a user to root is refused.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import yaml

from coddl.runtime.errors import ConfigError

ACCOUNTS_FILE = "accounts.yaml"
PREFIX = "coddl-"
_PLAIN = re.compile(r"^[a-z][a-z0-9_]{0,24}$")  # coddl- + 25 = 31 characters, within useradd's 32
_SANITISE = re.compile(r"[^a-z0-9_]")


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str | None  # None: no home directory (a dedicated account); the job's HOME is its directory


def dedicated_account(user: str) -> str:
    """The account the server creates for ``user``: different users always get different names."""
    if _PLAIN.match(user):
        return PREFIX + user
    stem = _SANITISE.sub("", user.lower())[:12] or "u"
    return f"{PREFIX}{stem}-{hashlib.sha256(user.encode()).hexdigest()[:12]}"


def marker(user: str) -> str:
    """The comment field of ``user``'s dedicated account (a hash: the user name may be any text)."""
    return f"coddl job account {hashlib.sha256(user.encode()).hexdigest()[:24]}"


class AccountMap:
    """coddl user → Unix account; thread-safe (jobs start from many threads)."""

    def __init__(self, mapping: dict[str, str] | None = None, create: bool = True) -> None:
        self.mapping = dict(mapping or {})
        self.create = create
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # travels to Ray's node agents; the lock does not
        return {"mapping": self.mapping, "create": self.create}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["mapping"], state["create"])

    @classmethod
    def load(cls, state_dir: Path) -> AccountMap:
        """The state directory's ``accounts.yaml`` (absent: every user gets a dedicated account)."""
        path = Path(state_dir) / ACCOUNTS_FILE
        if not path.is_file():
            return cls()
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: not readable YAML ({str(e).splitlines()[0]})") from None
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of coddl user to Unix account")
        mapping: dict[str, str] = {}
        for user, account in data.items():
            if not isinstance(user, str) or not isinstance(account, str) or not account:
                raise ConfigError(f"{path}: {user!r}: expected 'user: account' with both names as text")
            try:
                entry = pwd.getpwnam(account)
            except KeyError:
                raise ConfigError(f"{path}: {user}: no Unix account {account!r} on this host") from None
            if entry.pw_uid == 0:
                raise ConfigError(f"{path}: {user}: {account!r} is uid 0; a job never runs as root")
            mapping[user] = account
        return cls(mapping)

    def account_for(self, user: str) -> str:
        return self.mapping.get(user) or dedicated_account(user)

    def ensure(self, user: str) -> Account:
        """The account ``user``'s jobs run as, created first if it is a dedicated one that is missing.
        Raises PermissionError (a one-line reason) when there is none the job may use."""
        name = self.account_for(user)
        with self._lock:
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                if user in self.mapping or not self.create:
                    raise PermissionError(f"user {user!r}: no Unix account {name!r} on this host") from None
                entry = _create(name, marker(user))
        if user not in self.mapping and entry.pw_gecos != marker(user):
            raise PermissionError(f"user {user!r}: account {name!r} exists but was not created by coddl for "
                                  f"this user; map the user to an account in {ACCOUNTS_FILE}")
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise PermissionError(f"user {user!r}: account {name!r} is root's (uid or gid 0); refused")
        home = entry.pw_dir if user in self.mapping and os.path.isdir(entry.pw_dir) else None
        return Account(name, entry.pw_uid, entry.pw_gid, home)


def _create(name: str, comment: str) -> pwd.struct_passwd:
    cmd = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
           "--shell", "/usr/sbin/nologin", "--comment", comment, name]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PermissionError(f"cannot create the account {name!r} ({e})") from None
    try:
        return pwd.getpwnam(name)  # useradd exit 9: someone created it meanwhile
    except KeyError:
        raise PermissionError(f"cannot create the account {name!r}: {r.stderr.strip() or r.returncode}") from None

"""Which Unix account runs a coddl user's jobs, when the server runs as root.

A coddl user is a name on an API token; nothing ties it to an account on the machine. The operator
may map users to existing accounts in the state directory's ``accounts.yaml``::

    # coddl user: Unix account
    alice: alice
    bob: bob

and then alice's jobs run as alice, with exactly her file permissions (her data, her home), as on a
Slurm cluster. Every user not in the file gets a dedicated, unprivileged account of their own that
the server creates on first use (``useradd --system``, no home, no login shell): ``coddl-NAME`` for
a name of lowercase letters, digits and ``_`` (``coddl-alice``), and ``coddl-STEM-HASH`` for any
other name (``Alice`` → ``coddl-alice-5f3c...``), so that two users never share an account. A
dedicated account carries a marker in its comment field; an account of that name that the server did
not create for that user is never used. No job ever runs as uid 0: mapping a user to root is refused.

``coddl-`` is the default prefix of the dedicated accounts (``coddl server start --account-prefix``).
Two installations on one host whose users are different people each need a prefix of their own, or
the two installations' ``bob`` would share an account and each other's files; a test or a benchmark
uses a fresh prefix so that it can remove exactly the accounts it caused (``remove_accounts``).
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

from coddl.errors import ConfigError

ACCOUNTS_FILE = "accounts.yaml"
PREFIX = "coddl-"
MAX_NAME = 31  # within useradd's 32
_PREFIX = re.compile(r"^[a-z][a-z0-9_-]{0,11}$")
_PLAIN = re.compile(r"^[a-z][a-z0-9_]*$")
_SANITISE = re.compile(r"[^a-z0-9_]")
_MARK = "coddl job account "


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str | None  # None: no home directory (a dedicated account); the job's HOME is its directory


def check_prefix(prefix: str) -> str:
    """``prefix`` if it can start account names (a lowercase letter, then at most 11 of a-z 0-9 _ -)."""
    if not _PREFIX.match(prefix):
        raise ConfigError(f"--account-prefix: {prefix!r} must be a lowercase letter followed by at most 11 "
                          "lowercase letters, digits, '_' or '-'")
    return prefix


def dedicated_account(user: str, prefix: str = PREFIX) -> str:
    """The account the server creates for ``user``: different users always get different names (a
    plain name whole, any other one, or one too long, as a stem and a hash of the whole name)."""
    if _PLAIN.match(user) and len(prefix) + len(user) <= MAX_NAME:
        return prefix + user
    stem = _SANITISE.sub("", user.lower())[: min(12, MAX_NAME - len(prefix) - 13)] or "u"
    return f"{prefix}{stem}-{hashlib.sha256(user.encode()).hexdigest()[:12]}"


def marker(user: str) -> str:
    """The comment field of ``user``'s dedicated account (a hash: the user name may be any text)."""
    return f"{_MARK}{hashlib.sha256(user.encode()).hexdigest()[:24]}"


def remove_accounts(prefix: str) -> tuple[list[str], dict[str, str]]:
    """Delete the dedicated accounts of ``prefix`` (those coddl created: named ``prefix...`` and
    carrying its marker), with their groups; an account a process still runs as is kept. Returns the
    names removed and, for each one kept, why. Run it when no server uses the prefix any more: the
    cleanup of a test or a benchmark, or of an installation being taken down."""
    removed: list[str] = []
    kept: dict[str, str] = {}
    for entry in pwd.getpwall():
        if not entry.pw_name.startswith(check_prefix(prefix)) or not entry.pw_gecos.startswith(_MARK):
            continue
        r = subprocess.run(["userdel", entry.pw_name], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        if r.returncode == 0:
            removed.append(entry.pw_name)
        else:
            kept[entry.pw_name] = r.stderr.strip() or f"userdel exit {r.returncode}"
    return removed, kept


class AccountMap:
    """coddl user → Unix account; thread-safe (jobs start from many threads)."""

    def __init__(self, mapping: dict[str, str] | None = None, create: bool = True, prefix: str = PREFIX) -> None:
        self.mapping = dict(mapping or {})
        self.create = create
        self.prefix = check_prefix(prefix)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # travels to Ray's node agents; the lock does not
        return {"mapping": self.mapping, "create": self.create, "prefix": self.prefix}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["mapping"], state["create"], state["prefix"])

    @classmethod
    def load(cls, state_dir: Path, prefix: str = PREFIX) -> AccountMap:
        """The state directory's ``accounts.yaml`` (absent: every user gets a dedicated account)."""
        path = Path(state_dir) / ACCOUNTS_FILE
        if not path.is_file():
            return cls(prefix=prefix)
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: not readable YAML ({str(e).splitlines()[0]})") from None
        if data is None:
            return cls(prefix=prefix)
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
        return cls(mapping, prefix=prefix)

    def account_for(self, user: str) -> str:
        return self.mapping.get(user) or dedicated_account(user, self.prefix)

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

"""coddl users → Unix accounts (``coddl.runtime.identity``)."""

from __future__ import annotations

import grp
import os
import pwd
import re
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coddl.errors import ConfigError
from coddl.runtime.identity import AccountMap, check_prefix, dedicated_account, marker, remove_accounts


def test_dedicated_account_names():
    assert dedicated_account("alice") == "coddl-alice"
    assert dedicated_account("bob_2") == "coddl-bob_2"
    assert dedicated_account("Alice").startswith("coddl-alice-") and dedicated_account("Alice") != "coddl-alice"
    assert dedicated_account("a" * 26).startswith("coddl-aaaaaaaaaaaa-")  # too long to keep whole
    assert dedicated_account("名前") .startswith("coddl-u-")
    # another installation's prefix: the same user, another account; a long prefix leaves a shorter stem
    assert dedicated_account("alice", "lab2-") == "lab2-alice"
    assert dedicated_account("a" * 20, "abcdefghijk-") == "abcdefghijk-aaaaaa-42492da06234"  # sha256 of the name
    assert dedicated_account("a" * 19, "abcdefghijk-") == "abcdefghijk-" + "a" * 19  # 31 characters: whole


def test_an_account_prefix_must_be_a_name_useradd_takes():
    for bad in ("", "Coddl-", "1coddl", "co ddl", "coddl/", "a" * 13, "-x"):
        with pytest.raises(ConfigError, match="--account-prefix: .* must be a lowercase letter"):
            check_prefix(bad)
    with pytest.raises(ConfigError, match="--account-prefix"):
        AccountMap(prefix="../etc")


@given(st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64),
       st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True))
def test_two_users_never_share_an_account_and_names_fit_useradd(a, b, prefix):
    name = dedicated_account(a, prefix)
    assert len(name) <= 31 and name.startswith(prefix), name
    assert re.fullmatch(r"[a-z0-9_]+(-[0-9a-f]{12})?", name[len(prefix):]), name
    if a != b:
        assert dedicated_account(a, prefix) != dedicated_account(b, prefix)
        assert marker(a) != marker(b)


def test_the_mapping_file_is_checked(tmp_path):
    (tmp_path / "accounts.yaml").write_text("alice: root\n")
    with pytest.raises(ConfigError, match="accounts.yaml: alice: 'root' is uid 0; a job never runs as root"):
        AccountMap.load(tmp_path)
    (tmp_path / "accounts.yaml").write_text("alice: no-such-account-here\n")
    with pytest.raises(ConfigError, match="no Unix account 'no-such-account-here'"):
        AccountMap.load(tmp_path)
    (tmp_path / "accounts.yaml").write_text("- alice\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        AccountMap.load(tmp_path)
    (tmp_path / "accounts.yaml").write_text("alice: nobody\n")
    m = AccountMap.load(tmp_path)
    assert m.account_for("alice") == "nobody" and m.account_for("bob") == "coddl-bob"


def test_an_account_not_made_by_coddl_for_the_user_is_never_used_and_only_coddls_are_removed():
    with pytest.raises(PermissionError, match="no Unix account 'coddl-nosuchuserxyz'"):
        AccountMap(create=False).ensure("nosuchuserxyz")
    if os.geteuid() != 0:
        pytest.skip("creating accounts needs root")
    prefix = f"ci{os.urandom(3).hex()}-"  # this test's own: tests beside it never see its accounts
    squatter = prefix + "squatter"
    subprocess.run(["useradd", "--system", "--no-create-home", squatter], check=True, capture_output=True)
    try:
        with pytest.raises(PermissionError, match="exists but was not created by coddl for this user"):
            AccountMap(prefix=prefix).ensure("squatter")
        made = AccountMap(prefix=prefix).ensure("mint_fresh")  # created on first use, with its marker
        assert made.name == prefix + "mint_fresh" and made.uid != 0 and made.home is None
        assert AccountMap(prefix=prefix).ensure("mint_fresh") == made
        other = AccountMap(prefix=prefix).ensure("Other User")
        # the cleanup removes what coddl made under the prefix, and nothing else: not the squatter
        removed, kept = remove_accounts(prefix)
        assert sorted(removed) == sorted([made.name, other.name]) and kept == {}
        names = {p.pw_name for p in pwd.getpwall()}
        assert squatter in names and made.name not in names and other.name not in names
        with pytest.raises(KeyError):
            grp.getgrnam(made.name)  # its own group went with it
    finally:
        for name in (squatter, prefix + "mint_fresh"):
            subprocess.run(["userdel", name], capture_output=True)

"""coddl users → Unix accounts (``coddl.runtime.identity``)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coddl.runtime.errors import ConfigError
from coddl.runtime.identity import AccountMap, dedicated_account, marker


def test_dedicated_account_names():
    assert dedicated_account("alice") == "coddl-alice"
    assert dedicated_account("bob_2") == "coddl-bob_2"
    assert dedicated_account("Alice").startswith("coddl-alice-") and dedicated_account("Alice") != "coddl-alice"
    assert dedicated_account("a" * 26).startswith("coddl-aaaaaaaaaaaa-")  # too long to keep whole
    assert dedicated_account("名前") .startswith("coddl-u-")


@given(st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64))
def test_two_users_never_share_an_account_and_names_fit_useradd(a, b):
    name = dedicated_account(a)
    assert len(name) <= 32 and re.fullmatch(r"coddl-[a-z0-9_]+(-[0-9a-f]{12})?", name), name
    if a != b:
        assert dedicated_account(a) != dedicated_account(b)
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


def test_an_account_not_made_by_coddl_for_the_user_is_never_used():
    with pytest.raises(PermissionError, match="no Unix account 'coddl-nosuchuserxyz'"):
        AccountMap(create=False).ensure("nosuchuserxyz")
    if os.geteuid() != 0:
        pytest.skip("creating accounts needs root")
    subprocess.run(["useradd", "--system", "--no-create-home", "coddl-squatter"], check=True, capture_output=True)
    try:
        with pytest.raises(PermissionError, match="exists but was not created by coddl for this user"):
            AccountMap().ensure("squatter")
        made = AccountMap().ensure("mint_fresh")  # created on first use, with its marker
        assert made.name == "coddl-mint_fresh" and made.uid != 0 and made.home is None
        assert AccountMap().ensure("mint_fresh") == made
    finally:
        for name in ("coddl-squatter", "coddl-mint_fresh"):
            subprocess.run(["userdel", name], capture_output=True)

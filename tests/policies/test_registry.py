"""Policy registration: built-ins found by scanning the package, third-party policies by entry point.

The plug-in test installs nothing: it writes a real distribution (a module plus ``*.dist-info`` with
``entry_points.txt``) into a temporary directory and puts it on ``PYTHONPATH``, which is exactly what
``importlib.metadata`` reads for an installed package, then asks a fresh interpreter for policies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coddl.policies import available, make_policy, register
from coddl.policies.registry import PolicySpecError

BUILTIN = {"afs-l", "afs-p", "aiturbo", "fifo", "max-min", "optimus", "srsf", "srtf", "themis",
           "tiresias-g", "tiresias-l"}

PLUGIN = '''
from dataclasses import dataclass
import numpy as np
from coddl.policies import Policy, register

@register
class Smallest(Policy):
    """Smallest request first, rigid: a toy policy from outside the tree."""
    name = "smallest-first"
    elastic = False
    summary = "smallest request first (a plug-in)"

    @dataclass
    class Params:
        limit: int = 0

    def allocate(self, ctx):
        j = ctx.jobs
        out = np.zeros_like(j.requested)
        free = ctx.capacity
        for i in np.argsort(j.requested, kind="stable"):
            if j.requested[i] <= free:
                out[i] = j.requested[i]
                free -= j.requested[i]
        return out
'''


def test_every_builtin_policy_is_found_by_scanning_the_package() -> None:
    assert BUILTIN <= set(available())


def test_two_classes_cannot_claim_one_name() -> None:
    fifo = type(make_policy("fifo"))
    impostor = type("Fifo", (fifo,), {"__module__": "somewhere.else"})
    with pytest.raises(PolicySpecError, match="'fifo' is taken by coddl.policies.fifo.Fifo"):
        register(impostor)
    assert type(make_policy("fifo")) is fifo


def _distribution(root: Path, entry: str) -> None:
    (root / "smallest_plugin.py").write_text(PLUGIN)
    info = root / "smallest_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: smallest-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[coddl.policies]\nsmallest = {entry}\n")


def _python(root: Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_third_party_package_adds_a_policy_by_entry_point(tmp_path: Path) -> None:
    _distribution(tmp_path, "smallest_plugin")
    out = _python(tmp_path, """
        from coddl.policies import available, make_policy
        p = make_policy("smallest-first:limit=3")
        print(sorted(available()).count("smallest-first"), p.params.limit, "fifo" in available())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "3", "True"]


def test_a_plugin_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    _distribution(tmp_path, "no_such_module_anywhere")
    out = _python(tmp_path, """
        from coddl.policies import make_policy
        from coddl.policies.registry import PolicySpecError
        try:
            make_policy("fifo")
        except PolicySpecError as e:
            print(e)
    """)
    assert "policy plug-in 'smallest' (no_such_module_anywhere) cannot be imported" in out.stdout

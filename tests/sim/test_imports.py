"""The simulator's start-up cost: ``coddl simulate`` must not import torch (about 2 s on these
machines), which only training processes and the real executors need."""

import subprocess
import sys


def test_simulator_and_cli_import_without_torch():
    code = ("import sys, coddl.cli.main, coddl.sim.engine, coddl.sim.run, coddl.experiments.coddl_nsdi21; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_simulation_imports_neither_the_solvers_nor_scipy_until_a_policy_needs_them():
    """Every policy module is imported to resolve policy names; scipy's optimiser and sparse
    matrices and HiGHS (about 0.5 s together) are imported only by the fits and the LP that use
    them. (numba imports scipy's top package itself, which costs milliseconds.)"""
    code = ("import sys, coddl.cli.main, coddl.sim.run; from coddl.policies.registry import available; "
            "available(); print(sorted(m for m in sys.modules if m.split('.')[0] == 'highspy' "
            "or m.startswith(('scipy.optimize', 'scipy.sparse'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

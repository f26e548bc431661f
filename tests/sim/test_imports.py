"""The simulator's start-up cost: ``coddl simulate`` must not import torch (about 2 s on these
machines), which only training processes and the real executors need."""

import subprocess
import sys


def test_simulator_and_cli_import_without_torch():
    code = ("import sys, coddl.cli.main, coddl.sim.engine, coddl.sim.run, coddl.experiments.coddl_nsdi21; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""The example scripts train standalone (world size 1) and their loss goes down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def losses(script: str, *args: str) -> dict[int, float]:
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return {int(step): float(loss) for step, loss in re.findall(r"step (\d+) world 1 loss ([\d.]+)", out)}


@pytest.mark.slow
def test_mlp_example_learns_standalone() -> None:
    got = losses("train_mlp.py", "--steps", "50", "--global-batch", "64")
    assert set(got) == {1, 50} and got[50] < 0.7 * got[1], got


@pytest.mark.slow
def test_cnn_example_learns_standalone() -> None:
    got = losses("train_cnn.py", "--steps", "60", "--global-batch", "32")
    assert set(got) == {1, 20, 40, 60} and got[60] < 0.7 * got[1], got

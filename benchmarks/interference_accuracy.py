"""Held-out accuracy of the co-location interference model on every GPU type Gavel measured.

Prints JSON: per GPU type, the absolute percentage error of the retained fraction for each measured
pair held out (the sensitivity × pressure model), for each job type held out (the fallback for a job
never measured) and for the median of the other pairs (baseline). Run:
``python benchmarks/interference_accuracy.py``.
"""

from __future__ import annotations

import json

from coddl.perf.interference import leave_one_out, load_gavel_pairs


def main() -> None:
    print(json.dumps([leave_one_out(load_gavel_pairs(g)).as_dict() for g in ("k80", "p100", "v100")], indent=2))


if __name__ == "__main__":
    main()

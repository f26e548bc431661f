"""How faithfully the testbed's link follows its ``tc`` limit: TCP goodput and round-trip time between two
node namespaces, unlimited and at several rates (and delays, where the kernel has netem). Prints JSON.

Each setting is measured ``--runs`` times in both directions; the median goodput is compared with the
limit (payload over 1500-byte frames is at most ~95% of the metered rate). Needs root and iproute2.
The machine's load average is printed too: a loaded host can only lower the unlimited figure.

    sudo python benchmarks/testbed_link.py [--rates 50mbit,200mbit,1gbit] [--delays 0,2ms] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from coddl.runtime.testbed.netns import (LinkLimit, Wiring, netem_available, parse_delay, parse_rate, tear_down,
                                         unavailable_reason)
from coddl.runtime.testbed.probe import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50mbit,200mbit,1gbit")
    parser.add_argument("--delays", default="0,2ms")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"error: {reason}")
    netem = netem_available()
    delays = [parse_delay(d) for d in args.delays.split(",")]
    settings = [LinkLimit()] + [LinkLimit(parse_rate(r), d) for r in args.rates.split(",") for d in delays
                                if d == 0 or netem]
    wiring = Wiring(f"cdbench{os.getpid()}", 2)
    rows = []
    try:
        wiring.build()
        for limit in settings:
            wiring.shape(limit)
            size = 4 << 20 if limit.rate_bps is None else max(3 << 20, int(limit.rate_bps / 8 * 0.5))
            ms = [measure(wiring.node(a), wiring.node(b), wiring.address(b), total_bytes=size)
                  for _ in range(args.runs) for a, b in ((0, 1), (1, 0))]
            goodput = statistics.median(m.goodput_bps for m in ms)
            rtt = statistics.median(m.rtt_s for m in ms)
            row = {"rate_mbit_s": None if limit.rate_bps is None else limit.rate_bps / 1e6,
                   "delay_ms": limit.delay_s * 1e3, "goodput_mbit_s": round(goodput / 1e6, 1),
                   "goodput_min_mbit_s": round(min(m.goodput_bps for m in ms) / 1e6, 1),
                   "rtt_ms": round(rtt * 1e3, 3)}
            if limit.rate_bps is not None:
                row["goodput_over_rate"] = round(goodput / limit.rate_bps, 3)
            if limit.delay_s:
                row["rtt_over_2_delay"] = round(rtt / (2 * limit.delay_s), 3)
            rows.append(row)
    finally:
        tear_down(wiring.prefix)
    print(json.dumps({"netem": netem, "runs": args.runs, "load_avg_1m": round(os.getloadavg()[0], 2),
                      "cpus": os.cpu_count(), "links": rows}, indent=2))


if __name__ == "__main__":
    main()

"""Network namespaces, veth pairs, a bridge and ``tc`` shaping: the wiring of a testbed's nodes.

Each node is a network namespace with one interface, ``eth0``, whose veth peer sits on a bridge in a
separate "switch" namespace. Every address lives inside those namespaces (a private range, 10.231.0.0/24
by default) and nothing is ever added to the host's own namespace, so a testbed can reach nothing but
itself and nothing outside it can reach the testbed. Node-to-node traffic leaves each node through its
``eth0``, where a netem qdisc adds the one-way delay and a tbf child limits the rate: every inter-node
packet crosses exactly one shaper (its sender's), so a one-way trip takes the delay and a round trip
twice that. Traffic within a node stays on that namespace's loopback and is never shaped.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from coddl.waiting import WaitTimeout, wait_until

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
SUBNET = "10.231.0"  # the testbed's private /24; node i is SUBNET.(i + 1)


NO_NETEM = ("this kernel has no netem qdisc (sch_netem), so a delay cannot be added to the link; "
            "use --delay 0 (tbf still limits the bandwidth)")


def netem_available() -> bool:
    """Whether this kernel can add delay (netem); tried on the loopback of a throwaway namespace."""
    ns = f"coddl-netem-probe-{os.getpid()}"
    if _run("ip", "netns", "add", ns, check=False).returncode != 0:
        return False
    try:
        return _run("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                    check=False).returncode == 0
    finally:
        _run("ip", "netns", "delete", ns, check=False)


class TestbedError(RuntimeError):
    """The testbed cannot be built or driven here; the message is one line for the user."""

    __test__ = False  # not a pytest class, despite the name


@dataclass(frozen=True)
class LinkLimit:
    """What ``tc`` imposes on each node's egress: a rate (bits/s; None: unlimited) and a one-way delay."""

    rate_bps: float | None = None
    delay_s: float = 0.0

    @property
    def limited(self) -> bool:
        return self.rate_bps is not None or self.delay_s > 0

    def describe(self) -> str:
        rate = "unlimited" if self.rate_bps is None else format_rate(self.rate_bps)
        return f"{rate}, {self.delay_s * 1e3:g} ms one way"


_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
# tbf's burst (a millisecond of the rate, in bytes) must fit its 32 bits; a minute of delay is
# already far past any link the testbed stands in for
MAX_RATE_BPS, MAX_DELAY_S = 1e12, 60.0


def parse_rate(text: str) -> float:
    """'1gbit', '100mbit', '500kbit' (tc's units; 'mbps' means megabytes/s as in tc) → bits per second."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _RATE_UNITS or not 0 < float(m.group(1)) * _RATE_UNITS[unit] <= MAX_RATE_BPS:
        raise ValueError(f"expected a positive rate up to 1000gbit such as 1gbit or 100mbit, got {text!r}")
    return float(m.group(1)) * _RATE_UNITS[unit]


def parse_bandwidth(text: str) -> float | None:
    """A link's rate as ``--bandwidth`` takes it: tc units (``parse_rate``), or 'none'/'unlimited' (None)."""
    return None if text.strip().lower() in ("none", "unlimited") else parse_rate(text)


def parse_delay(text: str) -> float:
    """'2ms', '500us', '0' → seconds."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = (m.group(2).lower() or "s") if m else ""
    if not m or unit not in _TIME_UNITS or (m.group(2) == "" and float(m.group(1)) != 0) \
            or float(m.group(1)) * _TIME_UNITS[unit] > MAX_DELAY_S:
        raise ValueError(f"expected a delay up to 60s such as 2ms or 500us, got {text!r}")
    return float(m.group(1)) * _TIME_UNITS[unit]


def format_rate(bps: float) -> str:
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"


def unavailable_reason() -> str | None:
    """Why namespaces cannot be built here (None: they can): not root, or no ``ip``/``tc``."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, as CI does)"
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        return f"{' and '.join(missing)} not found (install iproute2)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        last = ((r.stderr or r.stdout).strip().splitlines() or ["failed"])[-1]
        raise TestbedError(f"{' '.join(argv)}: {last}")
    return r


def list_namespaces(prefix: str) -> list[str]:
    """The namespaces whose names start with ``prefix-`` (a testbed's), sorted."""
    out = _run("ip", "netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix + "-"))


def namespace_pids(ns: str) -> list[int]:
    out = _run("ip", "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


@dataclass(frozen=True)
class Wiring:
    """The names and addresses of one testbed's namespaces."""

    prefix: str
    nodes: int

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def node(self, i: int) -> str:
        return f"{self.prefix}-n{i}"

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def build(self) -> None:
        """Create the switch and node namespaces and wire them; raises TestbedError (caller tears down)."""
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for i in range(self.nodes):
            ns = self.node(i)
            _run("ip", "netns", "add", ns)
            # Both ends are created straight inside their namespaces: nothing appears on the host.
            _run("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"n{i}",
                 "netns", self.switch)
            _run("ip", "-n", self.switch, "link", "set", f"n{i}", "master", "br0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            # A default route into the bridge (which has no way out) lets software that finds "its" address
            # by routing towards a public one (Ray does) find eth0's, instead of failing over to loopback.
            _run("ip", "-n", ns, "route", "add", "default", "dev", "eth0")

    def shape(self, limit: LinkLimit) -> None:
        """Put ``limit`` on every node's egress (replacing what was there); an unlimited one removes it."""
        for i in range(self.nodes):
            ns = self.node(i)
            _run("tc", "-n", ns, "qdisc", "del", "dev", "eth0", "root", check=False)
            if not limit.limited:
                continue
            if limit.delay_s > 0:
                # netem holds each packet for the delay, then hands it to tbf, which meters the rate. Its queue
                # must hold a delay's worth of packets at the rate (the default 1000 is too few at 1 Gbit/s).
                in_flight = int((limit.rate_bps or 1e10) / 8 * limit.delay_s / 1000) + 1000
                r = _run("tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "delay",
                         f"{limit.delay_s * 1e6:.0f}us", "limit", str(in_flight), check=False)
                if r.returncode != 0:
                    raise TestbedError(NO_NETEM if "unknown" in r.stderr else f"tc netem: {r.stderr.strip()}")
            if limit.rate_bps is not None:
                # A small bucket (1 ms at the rate, at least 16 kB): a real link has no credit to spend, and a big
                # bucket refilled while a link idles would let every short transfer start faster than the rate.
                burst = max(16_000, int(limit.rate_bps / 8 * 0.001))
                parent = ("parent", "1:1", "handle", "10:") if limit.delay_s > 0 else ("root", "handle", "1:")
                _run("tc", "-n", ns, "qdisc", "add", "dev", "eth0", *parent, "tbf", "rate", f"{limit.rate_bps:.0f}bit",
                     "burst", str(burst), "latency", "200ms")

    def shaping(self, i: int) -> str:
        """``tc qdisc show`` of node i's eth0, for the record."""
        return _run("tc", "-n", self.node(i), "qdisc", "show", "dev", "eth0", check=False).stdout.strip()


def tear_down(prefix: str) -> list[str]:
    """Kill every process in the testbed's namespaces and delete the namespaces (their veths and the
    bridge go with them). Idempotent: a testbed half built, or already gone, is fine. Returns the
    namespaces removed."""
    names = list_namespaces(prefix)
    for ns in names:
        for pid in namespace_pids(ns):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    for ns in names:
        try:  # a killed process may hold the namespace for a moment
            wait_until(lambda ns=ns: not namespace_pids(ns), 5.0, f"{ns} still has processes", interval=0.1)
        except WaitTimeout:
            pass  # deleted anyway: `ip netns delete` only unmounts; the last process frees it
        _run("ip", "netns", "delete", ns, check=False)
    return names


@contextmanager
def inside(ns: str) -> Iterator[None]:
    """Run the calling thread (and what it starts: sockets, subprocesses) inside namespace ``ns``.

    setns(2) on a network namespace moves only the calling thread, and a child forked from it starts
    there too; the thread's own namespace is restored on exit."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
    except FileNotFoundError:
        os.close(own)
        raise TestbedError(f"no network namespace {ns!r}: is the testbed up?") from None
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise TestbedError(f"cannot enter network namespace {ns!r}: {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "cannot return to the thread's own network namespace")
    finally:
        os.close(target)
        os.close(own)

"""Measure what a link between two namespaces really gives: TCP goodput and round-trip time.

A receiver thread sits in one namespace, the sender in another; the round trip is the median of
small-message ping-pongs (TCP_NODELAY), the goodput is timed at the receiver after the first chunk so
that connection set-up and slow start do not count. Goodput is payload bytes: with 1500-byte frames
it is ~95% of the rate ``tc`` meters (which counts headers).
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from dataclasses import dataclass

from coddl.runtime.testbed.netns import inside

PORT = 47011
CHUNK = 1 << 20


@dataclass(frozen=True)
class LinkMeasurement:
    goodput_bps: float  # payload bits per second, sender to receiver
    rtt_s: float  # median round trip of a 1-byte message

    def as_dict(self) -> dict[str, float]:
        return {"goodput_mbit_s": round(self.goodput_bps / 1e6, 2), "rtt_ms": round(self.rtt_s * 1e3, 3)}


def _recv_exact(conn: socket.socket, n: int) -> None:
    view = memoryview(bytearray(n))
    got = 0
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("peer closed")
        got += k


def measure(src_ns: str, dst_ns: str, dst_address: str, total_bytes: int = 8 * CHUNK, pings: int = 30,
            timeout_s: float = 60.0) -> LinkMeasurement:
    """Send ``total_bytes`` (whole MiB, at least 2) from ``src_ns`` to ``dst_address`` (in ``dst_ns``) and
    ping-pong ``pings`` times."""
    total_bytes = max(2, total_bytes // CHUNK) * CHUNK
    ready = threading.Event()
    result: dict[str, float] = {}
    errors: list[BaseException] = []

    def receiver() -> None:
        try:
            with inside(dst_ns), socket.create_server((dst_address, PORT), reuse_port=False) as srv:
                srv.settimeout(timeout_s)
                ready.set()
                conn, _ = srv.accept()
                with conn:
                    conn.settimeout(timeout_s)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    for _ in range(pings):  # echo
                        _recv_exact(conn, 1)
                        conn.sendall(b"y")
                    _recv_exact(conn, CHUNK)  # warm-up: slow start, window growth
                    start = time.perf_counter()
                    _recv_exact(conn, total_bytes - CHUNK)
                    result["goodput_bps"] = (total_bytes - CHUNK) * 8 / (time.perf_counter() - start)
                    conn.sendall(b"d")
        except BaseException as e:  # noqa: BLE001 - reported by the sender's thread
            errors.append(e)
            ready.set()

    t = threading.Thread(target=receiver, name="link-probe-receiver", daemon=True)
    t.start()
    ready.wait(timeout_s)
    if errors:
        raise errors[0]
    with inside(src_ns), socket.create_connection((dst_address, PORT), timeout=timeout_s) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(pings):
            t0 = time.perf_counter()
            conn.sendall(b"x")
            _recv_exact(conn, 1)
            rtts.append(time.perf_counter() - t0)
        payload = bytes(CHUNK)
        for _ in range(total_bytes // CHUNK):
            conn.sendall(payload)
        _recv_exact(conn, 1)
    t.join(timeout_s)
    if errors:
        raise errors[0]
    return LinkMeasurement(goodput_bps=result["goodput_bps"], rtt_s=statistics.median(rtts))

"""``coddl.runtime.netns``: a gang's network namespace has only ``lo``, up; a process in it serves on
loopback where the host cannot reach it, and reaches a socket the server made inside it; and it is gone once its members and its holder are — also
when the holder is SIGKILLed, which is what a crashed controller or Ray node agent amounts to."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys

import pytest
from runtime_live import netns_alive, netns_identity

from coddl.elastic.sandbox import ConfinementError, _join_network, network_cookie
from coddl.runtime.netns import CLONE_NEWNET, Networks, cookie_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")


def test_a_gang_serves_on_its_own_loopback_and_its_namespace_ends_with_it():
    nets = Networks()
    ns = nets.join("job-1")
    path, ino, ident = ns.path, ns.ino, (ns.ino, ns.cookie)
    assert nets.join("job-1") == ns and nets.join("job-2").ino != ino  # one per gang
    assert cookie_of(path) == ns.cookie != nets.join("job-2").cookie != network_cookie() != 0
    nets.release("job-2")
    assert os.stat("/proc/self/ns/net").st_ino != ino  # the server never left the host's network
    served = nets.listen("job-1", "127.0.0.1")  # the server's socket inside the gang's namespace
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a rank: joins, serves on loopback, reports its interfaces and port
        fd = os.open(path, os.O_RDONLY)
        ok = ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) == 0
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        names = ",".join(n for _, n in socket.if_nameindex())
        socket.create_connection(("127.0.0.1", served.getsockname()[1]), timeout=5).close()  # reaches the server
        os.write(ready_w, f"{ok} {names} {s.getsockname()[1]}".encode())
        signal.pause()
        os._exit(0)
    ok, names, port = os.read(ready_r, 200).decode().split()
    try:
        assert ok == "True" and names == "lo"
        for unreachable in (int(port), served.getsockname()[1]):  # from the host's network: neither
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", unreachable), timeout=2)
        nets.release("job-1")
        assert netns_alive(ident)  # its rank is still in it
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    served.close()
    assert not netns_alive(ident)
    nets.close()


def test_a_killed_holder_leaves_no_namespace():
    holder = subprocess.Popen([sys.executable, "-c", "from coddl.runtime.netns import Networks; import sys, time\n"
                               "print(Networks().join('g').ino, flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        ns = netns_identity(int(holder.stdout.readline()))
        assert netns_alive(ns)
    finally:
        holder.kill()
        holder.wait()
    assert not netns_alive(ns)


def test_a_late_rank_refuses_a_namespace_that_took_its_gangs_descriptor_and_inode():
    """Gang A is stopped before its last rank starts; gang B's namespace then takes A's descriptor
    number and maybe A's inode number (the kernel hands on the lowest free of each). The rank must
    not join B's: A's cookie tells them apart."""
    nets = Networks()
    b = nets.join("gang-b")
    pid = os.fork()
    if pid == 0:
        try:
            _join_network(b.path, b.ino, b.cookie + 1)  # A's path and inode, as if reused; A's own cookie
        except ConfinementError as e:
            os._exit(3 if "is gone" in str(e) and network_cookie() != b.cookie + 1 else 4)
        os._exit(5)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
    pid = os.fork()
    if pid == 0:  # a rank that carries no cookie (as a kernel older than 5.14 would give) proves nothing
        try:
            _join_network(b.path, b.ino, 0)
        except ConfinementError as e:
            os._exit(3 if "is gone" in str(e) else 4)
        os._exit(5)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
    pid = os.fork()
    if pid == 0:  # B's own rank joins
        _join_network(b.path, b.ino, b.cookie)
        os._exit(0 if network_cookie() == b.cookie else 6)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    nets.close()


def test_a_root_server_refuses_to_start_where_namespaces_have_no_cookie(tmp_path, monkeypatch):
    """On a kernel without namespace cookies (older than 5.14; stood in for by the lookup answering 0,
    as it does there) a late rank could not tell its gang's namespace from another's, so the server's
    start-up check refuses rather than run gangs in networks that may not be their own."""
    from coddl.errors import ConfigError
    from coddl.elastic.pool import WorkerPool
    from coddl.runtime import isolation as iso

    launcher = iso.ConfinedLauncher(WorkerPool(), iso.Isolation("accounts", (str(tmp_path),)))
    monkeypatch.setattr(iso, "network_cookie", lambda: 0)
    with pytest.raises(ConfigError, match=r"its kernel gives a network namespace no cookie \(SO_NETNS_COOKIE, "
                                          r"Linux 5\.14 and later\)"):
        launcher.probe(tmp_path / "work")
    assert not (tmp_path / "work").exists()  # refused before any worker was started

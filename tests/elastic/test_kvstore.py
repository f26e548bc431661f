"""The job's coordination store (``coddl.elastic.kvstore``): TCPStore's semantics, served only to
holders of the job's key, bound to one address, and unharmed by anything a foreign or broken client
sends."""

from __future__ import annotations

import datetime
import socket
import struct
import time

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.elastic import kvstore
from coddl.elastic.kvstore import KVClient, KVServer, KVState, LocalStore, StoreRefused, StoreTimeout, new_secret

T = datetime.timedelta(seconds=2)


@pytest.fixture
def served():
    state, secret = KVState(), new_secret()
    server = KVServer(state, secret)
    yield state, secret, server
    server.close()


def client(server: KVServer, secret: bytes, timeout: datetime.timedelta = T) -> KVClient:
    return KVClient("127.0.0.1", server.port, secret, timeout)


def closed(s: socket.socket) -> bool:
    """Whether the server closed this connection (a reset, when it left our bytes unread)."""
    s.settimeout(5)
    try:
        return s.recv(64) == b""
    except ConnectionResetError:
        return True


def test_the_store_keeps_tcpstores_semantics(served):
    state, secret, server = served
    c = client(server, secret)
    c.set("a", b"1")
    c.set("s", "text")
    assert c.get("a") == b"1" and c.get("s") == b"text"
    assert c.add("n", 5) == 5 and c.add("n", -2) == 3 and c.get("n") == b"3"
    assert c.check(["a", "n"]) and not c.check(["a", "missing"])
    assert c.compare_set("cas", b"", b"first") == b"first"  # missing and expected empty: set
    assert c.compare_set("cas", b"wrong", b"x") == b"first"  # mismatch: unchanged, current returned
    assert c.compare_set("cas", b"first", b"second") == b"second"
    assert c.compare_set("nope", b"expected", b"x") == b"expected" and not c.check(["nope"])
    assert c.num_keys() == 4 and c.delete_key("a") and not c.delete_key("a") and c.num_keys() == 3
    with pytest.raises(StoreTimeout):
        KVClient("127.0.0.1", server.port, secret, datetime.timedelta(seconds=0.2)).get("never")
    with pytest.raises(dist.DistStoreError):  # what the session catches, as with TCPStore
        c.wait(["never"], datetime.timedelta(seconds=0.1))
    with pytest.raises(StoreRefused, match="integer"):
        c.add("s", 1)
    local = LocalStore(state, T)
    assert local.get("n") == b"3" and local.add("n", 1) == 4 and c.get("n") == b"4"


def test_a_get_waits_for_the_key(served):
    state, secret, server = served
    import threading

    threading.Timer(0.2, lambda: state.set("late", b"here")).start()
    t0 = time.monotonic()
    assert client(server, secret).get("late") == b"here" and time.monotonic() - t0 >= 0.15


def test_it_listens_on_the_given_address_only(served):
    _, _, server = served
    assert server._listener.getsockname()[0] == "127.0.0.1"


def test_a_client_without_the_key_is_refused_and_the_job_is_not_harmed(served):
    state, secret, server = served
    good = client(server, secret)
    good.set("generation", "1")
    with pytest.raises(StoreRefused, match="refused"):
        client(server, new_secret())
    with pytest.raises(Exception):  # torch's own client speaks another protocol
        dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=datetime.timedelta(seconds=1))
    with socket.create_connection(("127.0.0.1", server.port)) as s:  # garbage
        s.settimeout(5)
        s.recv(64)  # the greeting
        s.sendall(b"\x00" * 100 + b"generation=999")
        assert closed(s)
    assert state.data == {"generation": b"1"} and good.get("generation") == b"1"
    assert server.rejected >= 2


def _authenticated_socket(server: KVServer, secret: bytes) -> tuple[socket.socket, kvstore._Channel]:
    """A raw, authenticated connection (as a worker's), to send it frames by hand."""
    s = socket.create_connection(("127.0.0.1", server.port))
    hello = kvstore._recv_exact(s, len(kvstore.MAGIC) + kvstore.NONCE)
    ns, nc = hello[len(kvstore.MAGIC):], b"\x07" * kvstore.NONCE
    s.sendall(kvstore.MAGIC + nc + kvstore._mac(secret, b"client", ns, nc))
    assert kvstore._recv_exact(s, 32) == kvstore._mac(secret, b"server", ns, nc)
    return s, kvstore._Channel(s, kvstore._mac(secret, b"session", ns, nc), kvstore._TO_SERVER, kvstore._TO_CLIENT)


def test_a_forged_or_replayed_frame_closes_only_that_connection(served):
    state, secret, server = served
    good = client(server, secret)
    s, channel = _authenticated_socket(server, secret)
    channel.send(bytes([kvstore._SET]) + kvstore._fields(b"k", b"v"))
    assert channel.recv()[0] == kvstore._OK
    frame = bytes([kvstore._SET]) + kvstore._fields(b"k", b"forged")
    s.sendall(struct.pack(">I", len(frame) + 16) + frame + b"\x00" * 16)  # a MAC it cannot compute
    assert closed(s)
    assert state.data["k"] == b"v" and good.get("k") == b"v"


def test_the_store_bounds_what_a_job_may_put_in_it():
    state, secret = KVState(max_bytes=1000), new_secret()
    server = KVServer(state, secret)
    try:
        c = client(server, secret)
        c.set("small", b"x" * 100)
        with pytest.raises(StoreRefused, match="store full"):
            c.set("big", b"x" * 2000)
        assert c.get("small") == b"x" * 100 and not c.check(["big"])
        s, channel = _authenticated_socket(server, secret)
        s.sendall(struct.pack(">I", kvstore.MAX_FRAME + 1000))  # announces a frame beyond the limit
        assert closed(s)
        assert c.get("small") == b"x" * 100
    finally:
        server.close()


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=300))
def test_any_payload_from_a_key_holder_gets_an_answer_or_a_closed_connection(payload):
    state, secret = KVState(), new_secret()
    server = KVServer(state, secret)
    try:
        state.set("keep", b"me")
        s, channel = _authenticated_socket(server, secret)
        s.settimeout(5)
        channel.send(payload)
        try:
            reply = channel.recv()
            assert reply[0] in (kvstore._OK, kvstore._TIMEOUT, kvstore._ERROR)
        except (ConnectionError, OSError):
            pass  # malformed: dropped
        s.close()
        assert client(server, secret).get("keep") == b"me"
    finally:
        server.close()


def test_gloo_forms_a_group_on_the_store(served):
    _, secret, server = served
    kv = client(server, secret, datetime.timedelta(seconds=10))  # referenced: torch keeps only its C++ half
    store = dist.PrefixStore("gen1/pg", kv)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=10))
    try:
        import torch

        t = torch.ones(3)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_squatting_connections_do_not_lock_the_workers_out(served):
    state, secret, server = served
    squatters = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(kvstore.MAX_UNAUTHENTICATED + 8)]
    try:
        c = client(server, secret, datetime.timedelta(seconds=10))
        c.set("still", b"works")
        assert state.data["still"] == b"works" and server.rejected >= 8
    finally:
        for s in squatters:
            s.close()

"""A job's coordination store: a small key-value server that only the job's own workers can talk to,
and the client that ``torch.distributed`` uses as a ``dist.Store``.

Why not torch's ``TCPStore``: it listens on every interface and serves anyone who connects, so on a
shared cluster any process could rewrite a job's memberships or feed garbage to its workers (one
foreign write was enough to crash a worker). This store binds to ONE address (loopback for a job on
this host, the cluster interface for a multi-node job) and accepts only clients that prove they hold
the job's secret, which the executor hands to that job's workers alone (``CODDL_STORE_KEY``).

Protocol (version 1), over TCP:

    server → client   MAGIC · Ns                      Ns: 32 random bytes
    client → server   MAGIC · Nc · HMAC(secret, "client" · Ns · Nc)
    server → client   HMAC(secret, "server" · Ns · Nc)  (the client knows it reached the coordinator)

Both sides then derive ``K = HMAC(secret, "session" · Ns · Nc)`` and every frame is
``length (4 bytes) · payload · MAC`` with ``MAC = HMAC(K, direction · sequence number · payload)[:16]``,
so a frame cannot be forged, replayed or moved to another connection. Fresh nonces on both sides make
every connection's key different. Anything that does not verify — a foreign client, a malformed or
oversized frame, a bad MAC — closes that one connection; the store and the job's other connections
are untouched. A job cannot exhaust the server either: values, frames and the store's total size are
bounded, and so are connections that have not authenticated yet (past the bound, the oldest one is
dropped: a worker's handshake takes one round trip, a squatter's never ends; a worker whose
handshake was dropped all the same tries again until its timeout).

Values are bytes; ``add`` keeps integers as ASCII decimals, as ``TCPStore`` does. A ``get`` of a key
that does not exist yet waits for it (up to the timeout), which is what gloo's rendezvous relies on.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import logging
import os
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch.distributed as dist

from coddl.waiting import WaitTimeout, wait_until

log = logging.getLogger("coddl.kvstore")

MAGIC = b"CODDL-KV1"
NONCE = 32
MAC_BYTES = 16
MAX_FRAME = 1 << 20  # one request or reply; gloo's rendezvous values are a few hundred bytes
MAX_STORE_BYTES = 16 << 20  # keys + values of one job's store
MAX_UNAUTHENTICATED = 32  # connections still in their handshake
HANDSHAKE_TIMEOUT_S = 5.0
KEY_ENV = "CODDL_STORE_KEY"  # the job's secret, hex, in its workers' environment

# operations
_SET, _GET, _ADD, _CHECK, _WAIT, _CAS, _DELETE, _NUM_KEYS = range(1, 9)
# reply status
_OK, _TIMEOUT, _ERROR = 0, 1, 2
_TO_SERVER, _TO_CLIENT = b"S", b"C"


class StoreTimeout(dist.DistStoreError):
    """A ``get`` or ``wait`` whose keys did not appear in time (a ``DistStoreError``, as TCPStore raises)."""


class StoreRefused(dist.DistStoreError):
    """The store refused a request (too large, not an integer) or the connection failed."""


def new_secret() -> bytes:
    return os.urandom(32)


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


# ------------------------------------------------------------------ the data
@dataclass
class KVState:
    """The key-value data of one store, shared by the server's connections and the coordinator
    (which uses it in process, without a connection)."""

    max_bytes: int = MAX_STORE_BYTES
    data: dict[str, bytes] = field(default_factory=dict)
    size: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    listeners: list[Callable[[], None]] = field(default_factory=list)  # told of every change (the server)

    def _put(self, key: str, value: bytes) -> None:
        old = self.data.get(key)
        grow = len(value) - (len(old) if old is not None else -len(key))
        if self.size + grow > self.max_bytes:
            raise StoreRefused(f"store full ({self.max_bytes} bytes): refused {key!r}")
        self.data[key] = value
        self.size += grow
        self.changed.notify_all()
        for listener in self.listeners:
            listener()

    def set(self, key: str, value: bytes) -> None:
        with self.changed:
            self._put(key, bytes(value))

    def get(self, key: str, timeout_s: float) -> bytes:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.data, timeout_s):
                raise StoreTimeout(f"key {key!r} not set within {timeout_s:.1f} s")
            return self.data[key]

    def add(self, key: str, delta: int) -> int:
        with self.changed:
            raw = self.data.get(key, b"0")
            try:
                value = int(raw) + delta
            except ValueError:
                raise StoreRefused(f"add: {key!r} does not hold an integer") from None
            self._put(key, str(value).encode())
            return value

    def check(self, keys: Iterable[str]) -> bool:
        with self.changed:
            return all(k in self.data for k in keys)

    def wait(self, keys: Sequence[str], timeout_s: float) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: all(k in self.data for k in keys), timeout_s):
                raise StoreTimeout(f"keys {list(keys)!r} not set within {timeout_s:.1f} s")

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        """TCPStore's semantics: set ``desired`` if the key holds ``expected`` (or is missing and
        ``expected`` is empty); return the value the key holds afterwards (``expected`` if missing)."""
        with self.changed:
            current = self.data.get(key)
            if (current is None and not expected) or current == expected:
                self._put(key, bytes(desired))
                return bytes(desired)
            return bytes(expected) if current is None else current

    def delete(self, key: str) -> bool:
        with self.changed:
            old = self.data.pop(key, None)
            if old is None:
                return False
            self.size -= len(key) + len(old)
            return True

    def num_keys(self) -> int:
        with self.changed:
            return len(self.data)


# ------------------------------------------------------------------ framing
def _fields(*parts: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


def _parse(buf: memoryview) -> list[bytes]:
    out, i = [], 0
    while i < len(buf):
        if i + 4 > len(buf):
            raise ValueError("truncated field")
        (n,) = struct.unpack_from(">I", buf, i)
        if i + 4 + n > len(buf):
            raise ValueError("truncated field")
        out.append(bytes(buf[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed")
        got += k
    return bytes(buf)


class _Channel:
    """One authenticated connection's framing: MAC'd, sequence-numbered frames in each direction."""

    def __init__(self, sock: socket.socket, key: bytes, send_dir: bytes, recv_dir: bytes) -> None:
        self.sock = sock
        self._key = key
        self._send_dir, self._recv_dir = send_dir, recv_dir
        self._sent = self._received = 0

    def send(self, payload: bytes) -> None:
        mac = _mac(self._key, self._send_dir, struct.pack(">Q", self._sent), payload)[:MAC_BYTES]
        self._sent += 1
        self.sock.sendall(struct.pack(">I", len(payload) + MAC_BYTES) + payload + mac)

    def recv(self) -> memoryview:
        (n,) = struct.unpack(">I", _recv_exact(self.sock, 4))
        if not MAC_BYTES <= n <= MAX_FRAME + MAC_BYTES:
            raise ValueError(f"frame of {n} bytes")
        body = _recv_exact(self.sock, n)
        payload, mac = body[:-MAC_BYTES], body[-MAC_BYTES:]
        want = _mac(self._key, self._recv_dir, struct.pack(">Q", self._received), payload)[:MAC_BYTES]
        if not hmac.compare_digest(mac, want):
            raise ValueError("bad MAC")
        self._received += 1
        return memoryview(payload)


# ------------------------------------------------------------------ server
@dataclass(eq=False)
class _Conn:
    """One client connection, as the event loop sees it."""

    sock: socket.socket
    nonce: bytes  # ours, sent in the greeting
    opened: float  # monotonic, for the handshake's deadline
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    key: bytes | None = None  # the session key, once authenticated
    received: int = 0
    sent: int = 0
    parked: tuple[int, list[str], float] | None = None  # a GET/WAIT waiting for keys: (op, keys, deadline)


class KVServer:
    """Serves ``state`` on ``host`` (port chosen by the kernel) to clients holding ``secret``.

    One thread runs an event loop over every connection (as TCPStore's libuv server does): a request
    costs no thread hand-off, and a ``get``/``wait`` for a key that is not there yet is parked, not a
    blocked thread, until the key appears or the request's timeout passes.
    """

    def __init__(self, state: KVState, secret: bytes, host: str = "127.0.0.1",
                 listener: socket.socket | None = None) -> None:
        """``listener``: a socket already listening on ``host`` (one made inside the job's network
        namespace, ``coddl.runtime.netns.listen_in``); by default one is made here."""
        self.state = state
        self._secret = secret
        if listener is None:
            listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, 0))
            listener.listen(128)
        self._listener = listener
        self._listener.setblocking(False)
        self.host = host
        self.port = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[socket.socket, _Conn] = {}
        self._closed = False
        self.rejected = 0  # connections closed for failing authentication or framing (for tests and logs)
        state.listeners.append(self._wake)  # the coordinator writes in process: parked requests may resolve
        self._thread = threading.Thread(target=self._loop, name=f"kvstore-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(ValueError):
            self.state.listeners.remove(self._wake)
        self._wake()
        self._thread.join(timeout=5)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ---- the loop
    def _loop(self) -> None:
        try:
            while not self._closed:
                for key, mask in self._selector.select(self._next_deadline()):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        self._resolve()
                    else:
                        conn = key.data
                        if mask & selectors.EVENT_WRITE:
                            self._flush(conn)
                        if mask & selectors.EVENT_READ and conn.sock in self._conns:
                            self._read(conn)
                self._expire()
        finally:
            for conn in list(self._conns.values()):
                self._drop(conn)
            for sock in (self._listener, self._wake_r, self._wake_w):
                sock.close()
            self._selector.close()

    def _next_deadline(self) -> float | None:
        now, deadlines = time.monotonic(), []
        for c in self._conns.values():
            if c.key is None:
                deadlines.append(c.opened + HANDSHAKE_TIMEOUT_S)
            elif c.parked is not None:
                deadlines.append(c.parked[2])
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            pending = [c for c in self._conns.values() if c.key is None]
            if len(pending) >= MAX_UNAUTHENTICATED:
                self.rejected += 1
                self._drop(min(pending, key=lambda c: c.opened))
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, os.urandom(NONCE), time.monotonic())
            self._conns[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._send_raw(conn, MAGIC + conn.nonce)

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in list(self._conns.values()):
            if conn.key is None and now > conn.opened + HANDSHAKE_TIMEOUT_S:
                self.rejected += 1
                self._drop(conn)
            elif conn.parked is not None and now >= conn.parked[2]:
                _, keys, _ = conn.parked
                conn.parked = None
                self._reply(conn, bytes([_TIMEOUT]) + _fields(f"keys {keys!r} not set in time".encode()))
                self._process(conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.inbox += data
        self._process(conn)

    def _process(self, conn: _Conn) -> None:
        """Handle what ``conn`` sent: its handshake, then requests one at a time (a parked one holds
        the rest back: a client waits for each answer anyway)."""
        try:
            if conn.key is None:
                hello = len(MAGIC) + NONCE + 32
                if len(conn.inbox) < hello:
                    return
                msg, conn.inbox = bytes(conn.inbox[:hello]), conn.inbox[hello:]
                nc, proof = msg[len(MAGIC):len(MAGIC) + NONCE], msg[len(MAGIC) + NONCE:]
                if msg[:len(MAGIC)] != MAGIC or not hmac.compare_digest(proof, _mac(self._secret, b"client",
                                                                                      conn.nonce, nc)):
                    raise ValueError("handshake: not a holder of this job's key")
                self._send_raw(conn, _mac(self._secret, b"server", conn.nonce, nc))
                conn.key = _mac(self._secret, b"session", conn.nonce, nc)
            while conn.parked is None and len(conn.inbox) >= 4:
                (n,) = struct.unpack_from(">I", conn.inbox)
                if not MAC_BYTES <= n <= MAX_FRAME + MAC_BYTES:
                    raise ValueError(f"frame of {n} bytes")
                if len(conn.inbox) < 4 + n:
                    return
                body, conn.inbox = bytes(conn.inbox[4:4 + n]), conn.inbox[4 + n:]
                payload, mac = body[:-MAC_BYTES], body[-MAC_BYTES:]
                want = _mac(conn.key, _TO_SERVER, struct.pack(">Q", conn.received), payload)[:MAC_BYTES]
                if not hmac.compare_digest(mac, want):
                    raise ValueError("bad MAC")
                conn.received += 1
                reply = self._dispatch(conn, memoryview(payload))
                if reply is not None:
                    self._reply(conn, reply)
        except (ValueError, struct.error) as e:
            self.rejected += 1
            log.debug("store %s: dropped a connection: %s", self.address, e)
            self._drop(conn)

    def _resolve(self) -> None:
        """Answer the parked requests whose keys have appeared."""
        for conn in list(self._conns.values()):
            if conn.parked is None:
                continue
            op, keys, _ = conn.parked
            if not self.state.check(keys):
                continue
            conn.parked = None
            self._reply(conn, bytes([_OK]) + (_fields(self.state.data[keys[0]]) if op == _GET else b""))
            self._process(conn)

    def _reply(self, conn: _Conn, payload: bytes) -> None:
        mac = _mac(conn.key, _TO_CLIENT, struct.pack(">Q", conn.sent), payload)[:MAC_BYTES]
        conn.sent += 1
        self._send_raw(conn, struct.pack(">I", len(payload) + MAC_BYTES) + payload + mac)

    def _send_raw(self, conn: _Conn, data: bytes) -> None:
        conn.outbox += data
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        if conn.sock not in self._conns:
            return
        try:
            while conn.outbox:
                n = conn.sock.send(conn.outbox)
                del conn.outbox[:n]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(conn)
            return
        self._selector.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0), conn)

    def _drop(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()

    def _dispatch(self, conn: _Conn, request: memoryview) -> bytes | None:
        """The reply to one request, or None when it is parked."""
        if len(request) < 1:
            raise ValueError("empty request")
        op, args = request[0], _parse(request[1:])
        s = self.state
        try:
            if op == _SET and len(args) == 2:
                s.set(args[0].decode(), args[1])
                return bytes([_OK])
            if op in (_GET, _WAIT) and len(args) >= (2 if op == _GET else 1):
                keys = [args[0].decode()] if op == _GET else [a.decode() for a in args[1:]]
                seconds = _seconds(args[1] if op == _GET else args[0])
                if s.check(keys):
                    return bytes([_OK]) + (_fields(s.data[keys[0]]) if op == _GET else b"")
                conn.parked = (op, keys, time.monotonic() + seconds)
                return None
            if op == _ADD and len(args) == 2:
                return bytes([_OK]) + _fields(str(s.add(args[0].decode(), int(args[1]))).encode())
            if op == _CHECK:
                return bytes([_OK]) + _fields(b"1" if s.check(a.decode() for a in args) else b"0")
            if op == _CAS and len(args) == 3:
                return bytes([_OK]) + _fields(s.compare_set(args[0].decode(), args[1], args[2]))
            if op == _DELETE and len(args) == 1:
                return bytes([_OK]) + _fields(b"1" if s.delete(args[0].decode()) else b"0")
            if op == _NUM_KEYS and not args:
                return bytes([_OK]) + _fields(str(s.num_keys()).encode())
        except StoreRefused as e:
            return bytes([_ERROR]) + _fields(str(e).encode())
        except UnicodeDecodeError as e:
            raise ValueError(f"key is not text: {e}") from None
        raise ValueError(f"malformed request (operation {op}, {len(args)} fields)")


def _seconds(raw: bytes) -> float:
    ms = int(raw)
    if not 0 <= ms <= 7 * 86400 * 1000:
        raise ValueError(f"timeout of {ms} ms")
    return ms / 1000


def _ms(seconds: float) -> bytes:
    return str(max(0, int(seconds * 1000))).encode()


def _timeout_s(timeout: datetime.timedelta | float | None, default: datetime.timedelta) -> float:
    if timeout is None:
        return default.total_seconds()
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


# ------------------------------------------------------------------ clients
class KVClient(dist.Store):
    """A worker's connection to its job's store; usable wherever torch.distributed takes a Store."""

    def __init__(self, host: str, port: int, secret: bytes, timeout: datetime.timedelta) -> None:
        super().__init__()
        self.set_timeout(timeout)
        self._host, self._port, self._secret = host, port, secret
        self._lock = threading.Lock()
        self._channel = self._connect(timeout.total_seconds())

    def _connect(self, timeout_s: float) -> _Channel:
        """Connect and authenticate, trying again until ``timeout_s`` (a loaded host may be slow to accept,
        and a flood of foreign connections may have crowded our handshake out)."""
        refused: list[OSError] = []

        def handshake() -> _Channel | None:
            try:
                return self._handshake(max(1.0, min(10.0, timeout_s)))
            except ValueError as e:  # the other end is not our coordinator: no point trying again
                raise StoreRefused(f"store at {self._host}:{self._port}: {e}") from None
            except OSError as e:
                refused[:] = [e]
                return None

        try:
            return wait_until(handshake, timeout_s, f"no handshake with {self._host}:{self._port}", interval=0.05)
        except WaitTimeout:
            raise StoreRefused(f"store at {self._host}:{self._port} refused us ({refused[0]}): wrong {KEY_ENV}?") \
                from None

    def _handshake(self, timeout_s: float) -> _Channel:
        sock = socket.create_connection((self._host, self._port), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = _recv_exact(sock, len(MAGIC) + NONCE)
            if hello[:len(MAGIC)] != MAGIC:
                raise ValueError("not a coddl store")
            ns, nc = hello[len(MAGIC):], os.urandom(NONCE)
            sock.sendall(MAGIC + nc + _mac(self._secret, b"client", ns, nc))
            if not hmac.compare_digest(_recv_exact(sock, 32), _mac(self._secret, b"server", ns, nc)):
                raise ValueError("the server does not hold this job's key")
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return _Channel(sock, _mac(self._secret, b"session", ns, nc), _TO_SERVER, _TO_CLIENT)

    def _call(self, op: int, *args: bytes) -> list[bytes]:
        with self._lock:
            try:
                self._channel.send(bytes([op]) + _fields(*args))
                reply = self._channel.recv()
            except (OSError, ConnectionError, ValueError, struct.error) as e:
                raise StoreRefused(f"lost the job's store at {self._host}:{self._port}: {e}") from None
        status, rest = reply[0], _parse(reply[1:])
        if status == _TIMEOUT:
            raise StoreTimeout(rest[0].decode() if rest else "timeout")
        if status != _OK:
            raise StoreRefused(rest[0].decode() if rest else "refused")
        return rest

    def close(self) -> None:
        self._channel.sock.close()

    # the dist.Store interface (names the C++ trampoline looks up included)
    def set(self, key: str, value: bytes | str) -> None:
        self._call(_SET, key.encode(), value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key: str) -> bytes:
        return self._call(_GET, key.encode(), _ms(self.timeout.total_seconds()))[0]

    def add(self, key: str, value: int) -> int:
        return int(self._call(_ADD, key.encode(), str(int(value)).encode())[0])

    def check(self, keys: list[str]) -> bool:
        return self._call(_CHECK, *(k.encode() for k in keys))[0] == b"1"

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        self._call(_WAIT, _ms(_timeout_s(timeout, self.timeout)), *(k.encode() for k in keys))

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        enc = lambda v: v.encode() if isinstance(v, str) else bytes(v)  # noqa: E731
        return self._call(_CAS, key.encode(), enc(expected), enc(desired))[0]

    def delete_key(self, key: str) -> bool:
        return self._call(_DELETE, key.encode())[0] == b"1"

    deleteKey = delete_key

    def num_keys(self) -> int:
        return int(self._call(_NUM_KEYS)[0])

    getNumKeys = num_keys

    def clone(self) -> KVClient:
        return KVClient(self._host, self._port, self._secret, self.timeout)


class LocalStore(dist.Store):
    """The same store seen from inside the process that holds it (the coordinator, or a standalone
    session of one worker): no connection, no authentication needed."""

    def __init__(self, state: KVState, timeout: datetime.timedelta) -> None:
        super().__init__()
        self.set_timeout(timeout)
        self.state = state

    def set(self, key: str, value: bytes | str) -> None:
        self.state.set(key, value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key: str) -> bytes:
        return self.state.get(key, self.timeout.total_seconds())

    def add(self, key: str, value: int) -> int:
        return self.state.add(key, int(value))

    def check(self, keys: list[str]) -> bool:
        return self.state.check(keys)

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        self.state.wait(keys, _timeout_s(timeout, self.timeout))

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        enc = lambda v: v.encode() if isinstance(v, str) else bytes(v)  # noqa: E731
        return self.state.compare_set(key, enc(expected), enc(desired))

    def delete_key(self, key: str) -> bool:
        return self.state.delete(key)

    deleteKey = delete_key

    def num_keys(self) -> int:
        return self.state.num_keys()

    getNumKeys = num_keys

    def clone(self) -> LocalStore:
        return LocalStore(self.state, self.timeout)

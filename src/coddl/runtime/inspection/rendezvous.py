"""Where the inspection's ranks meet: a key-value store served by the inspecting process in plain Python.

torch's ``TCPStore`` would do, but it looks up the host name of every address it connects to, and
where no name server answers (a network namespace, an air-gapped cluster) each lookup waits for the
resolver's timeout — 6 s on the testbed, once in the inspecting process and again in every rank.
This store never resolves a name, and serving it takes no torch.
Clients authenticate with a key made for this inspection (``multiprocessing.connection``'s HMAC
challenge) before anything they send is unpickled. Each rank wraps its connection in a
``torch.distributed.Store`` (``connect``) for gloo's rendezvous.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge


class StoreServer:
    """Keys and values in memory, served to authenticated clients on ``port``, one thread per client."""

    def __init__(self, bind: str = "0.0.0.0") -> None:
        self.authkey = os.urandom(32)
        self._socket = socket.create_server((bind, 0))
        self.port: int = self._socket.getsockname()[1]
        self._data: dict[str, bytes] = {}
        self._changed = threading.Condition()
        threading.Thread(target=self._accept, name="inspection-store", daemon=True).start()

    def close(self) -> None:
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self._socket.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._socket.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(Connection(client.detach()),), name="inspection-store-client",
                             daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            try:  # in this client's thread: one that never answers holds up no other
                deliver_challenge(conn, self.authkey)
                answer_challenge(conn, self.authkey)
            except (OSError, EOFError, AuthenticationError):
                return
            while True:
                try:
                    op, *args = conn.recv()
                except (OSError, EOFError):
                    return
                try:
                    reply = getattr(self, f"_op_{op}")(*args)
                except Exception as e:  # noqa: BLE001 - the client raises it
                    reply = e
                conn.send(reply)

    def _await(self, keys: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not all(k in self._data for k in keys):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"rendezvous: no key {[k for k in keys if k not in self._data]} within "
                                       f"{timeout_s:g} s")
                self._changed.wait(left)

    def _op_set(self, key: str, value: bytes) -> None:
        with self._changed:
            self._data[key] = value
            self._changed.notify_all()

    def _op_get(self, key: str, timeout_s: float) -> bytes:
        self._await([key], timeout_s)
        return self._data[key]

    def _op_wait(self, keys: list[str], timeout_s: float) -> None:
        self._await(keys, timeout_s)

    def _op_check(self, keys: list[str]) -> bool:
        return all(k in self._data for k in keys)

    def _op_add(self, key: str, amount: int) -> int:
        with self._changed:
            value = int(self._data.get(key, b"0")) + amount
            self._data[key] = str(value).encode()
            self._changed.notify_all()
            return value

    def _op_compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        with self._changed:
            current = self._data.get(key)
            if (current is None and not expected) or current == expected:
                self._data[key] = current = desired
                self._changed.notify_all()
            return expected if current is None else current

    def _op_delete_key(self, key: str) -> bool:
        with self._changed:
            return self._data.pop(key, None) is not None

    def _op_num_keys(self) -> int:
        return len(self._data)


def connect(host: str, port: int, authkey: bytes, timeout_s: float):  # noqa: ANN201 - a torch.distributed.Store
    """A ``torch.distributed.Store`` on the ``StoreServer`` at ``host:port``."""
    import torch.distributed as dist

    class RemoteStore(dist.Store):
        def __init__(self) -> None:
            super().__init__()
            self._conn = Client((host, port), authkey=authkey)
            self._lock = threading.Lock()  # gloo may call from several threads
            self._timeout_s = timeout_s

        def _call(self, *request):  # noqa: ANN002, ANN202
            with self._lock:
                self._conn.send(request)
                reply = self._conn.recv()
            if isinstance(reply, Exception):
                raise reply
            return reply

        def set(self, key: str, value) -> None:  # noqa: ANN001 - str or bytes
            self._call("set", key, value.encode() if isinstance(value, str) else bytes(value))

        def get(self, key: str) -> bytes:
            return self._call("get", key, self._timeout_s)

        def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
            self._call("wait", keys, timeout.total_seconds() if timeout else self._timeout_s)

        def check(self, keys: list[str]) -> bool:
            return self._call("check", keys)

        def add(self, key: str, amount: int) -> int:
            return self._call("add", key, amount)

        def compare_set(self, key: str, expected, desired) -> bytes:  # noqa: ANN001 - str or bytes
            as_bytes = lambda v: v.encode() if isinstance(v, str) else bytes(v)  # noqa: E731
            return self._call("compare_set", key, as_bytes(expected), as_bytes(desired))

        def delete_key(self, key: str) -> bool:
            return self._call("delete_key", key)

        def num_keys(self) -> int:
            return self._call("num_keys")

        def set_timeout(self, timeout: datetime.timedelta) -> None:
            self._timeout_s = timeout.total_seconds()

    return RemoteStore()

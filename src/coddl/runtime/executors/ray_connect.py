"""Joining a Ray cluster as its driver, in bounded time and with one-line reasons, and reading its nodes.

Nothing here imports torch: the server's Ray executor, ``coddl cluster inspect`` and Ray sweeps all
join through it, and the latter two have no use for torch in the driver.

Left alone, ``ray.init(address=...)`` retries for 20 s or more and then raises a ConnectionError
with Ray's own traceback; for an address that drops packets each try can wait longer still; a cluster
with token authentication that this process has no token for fails after the same wait, or at once
with a paragraph. Here the address is checked first (a TCP connection within ``timeout_s``), Ray's
own retries get the same budget (``RAY_gcs_server_port_wait_time_s``, unless the operator set it),
and every failure becomes a ConfigError that says what to do.

``requires_token`` asks the cluster, from a fresh process that holds no token, whether it refuses
such a client: a cluster that does not lets anything that reaches its GCS port join it as a node and
run tasks on every node as the Ray nodes' account (``RayExecutor`` refuses it on an isolating server).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
from types import ModuleType

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.errors import ConfigError

DEFAULT_CONNECT_TIMEOUT_S = 15.0
_AUTH_HINT = "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the cluster's token"


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6), or ConfigError."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray-address: expected HOST:PORT of the Ray head (its GCS port), got {address!r}")
    return host, int(port)


def probe(address: str, timeout_s: float) -> None:
    """A TCP connection to the Ray head within ``timeout_s``, or ConfigError saying why not."""
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.gaierror as e:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: unknown host ({e.strerror})") from None
    except TimeoutError:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: no answer within {timeout_s:g} s "
                          f"(--ray-connect-timeout-s)") from None
    except ConnectionRefusedError:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: nothing listens there (is `ray start "
                          f"--head` running, and is this its GCS port?)") from None
    except OSError as e:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def _looks_like_auth(e: BaseException | None) -> bool:
    """Ray reports a refused token only inside the text of its last connection error."""
    for _ in range(8):  # the exception and its causes
        if e is None:
            return False
        if "InvalidAuthToken" in str(e) or "Unauthenticated" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def connect(ray: ModuleType, address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """``ray.init`` as this process's driver of the cluster at ``address``, or ConfigError."""
    if timeout_s <= 0:
        raise ConfigError(f"--ray-connect-timeout-s must be positive, got {timeout_s:g}")
    probe(address, timeout_s)
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(max(1, round(timeout_s))))
    try:
        ray.init(address=address, namespace="coddl", logging_level=logging.WARNING, log_to_driver=False)
    except ray.exceptions.AuthenticationError:
        raise ConfigError(f"the Ray cluster at {address} uses token authentication and this server has no "
                          f"token: {_AUTH_HINT}") from None
    except (ConnectionError, RuntimeError) as e:
        if _looks_like_auth(e):
            raise ConfigError(f"the Ray cluster at {address} refused this server's credentials: {_AUTH_HINT}") from None
        raise ConfigError(f"cannot connect to the Ray cluster at {address} within {timeout_s:g} s "
                          f"(--ray-connect-timeout-s): {str(e).splitlines()[0]}") from None


# Run with no token anywhere in reach (no RAY_AUTH_* variable, an empty HOME: no ~/.ray/auth_token): 0 if
# the GCS answers such a client, 3 if it refuses it for want of a token.
_UNAUTHENTICATED_CLIENT = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).internal_kv_keys(b"", None, timeout=float(sys.argv[2]))
except AuthenticationError:
    sys.exit(3)
"""


def requires_token(address: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> bool:
    """Whether the Ray cluster at ``address`` (already reachable) refuses a client without its token;
    ConfigError if that cannot be told."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    with tempfile.TemporaryDirectory(prefix="coddl-ray-probe-") as home:
        env.update(RAY_AUTH_MODE="disabled", HOME=home)
        try:
            r = subprocess.run([sys.executable, "-c", _UNAUTHENTICATED_CLIENT, address, str(max(1.0, timeout_s))],
                               env=env, cwd=home, capture_output=True, text=True, timeout=60 + 2 * timeout_s)
        except subprocess.TimeoutExpired:
            r = None
    if r is not None and r.returncode in (0, 3):
        return r.returncode == 3
    why = "no answer" if r is None else (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
    raise ConfigError(f"cannot tell whether the Ray cluster at {address} requires token authentication ({why})")


def import_ray(address: str):  # noqa: ANN202 - the ray module
    """Import ray for ``address``. For a loopback address Ray would rewrite 127.0.0.1 to the host's
    public address, which a Ray cluster bound to loopback does not answer (ray-project/ray#59110);
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps it on loopback. Ray reads it at import time."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "localhost", "::1"):
        if "ray" in sys.modules and os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0":
            raise ConfigError("a loopback Ray address needs RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 set before ray "
                              "is imported")
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    return ray


def ray_cluster(ray) -> tuple[Cluster, list[str]]:  # noqa: ANN001 - ray module
    """Our cluster from the live Ray nodes with GPUs, and the Ray node id of each of our nodes (each
    node's name is its address, '/', the start of its node id)."""
    alive = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) >= 1]
    alive.sort(key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))
    if not alive:
        raise ConfigError("the Ray cluster has no node with GPUs (start nodes with --num-gpus)")
    nodes = tuple(Node(name=f"{n['NodeManagerAddress']}/{n['NodeID'][:6]}", gpus=int(n["Resources"]["GPU"]),
                       gpu_type="ray", cpus=int(n["Resources"].get("CPU", 0))) for n in alive)
    return Cluster(nodes=nodes, gpu_types={"ray": GpuType("ray")}), [n["NodeID"] for n in alive]

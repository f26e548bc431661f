"""A multi-node Ray cluster on one machine whose inter-node traffic crosses a limited link.

``up`` builds the namespaces (``netns``), shapes each node's egress, and starts one Ray node per
namespace: the head (GCS and raylet) in node 0 at 10.231.0.1:6379, a raylet in each other node. A
driver — ``coddl server start --executor ray`` — runs inside node 0 (``ip netns exec PREFIX-n0 ...``),
so its workers on other nodes reach the job's store across the shaped link, and workers' gloo traffic
between nodes crosses it too (``GLOO_SOCKET_IFNAME=eth0`` in every node). ``down`` kills every process
in the testbed's namespaces and deletes them; it is idempotent, and ``up`` calls it on any failure.

Ray runs with token authentication, as a server that isolates its jobs demands: the jobs themselves run
in the testbed's namespaces, and a job that reached an unauthenticated Ray could run tasks as root on
every node. The token lives in a root-only directory of the testbed's own (``/tmp/PREFIX-auth``), named
by ``RAY_AUTH_TOKEN_PATH`` in every node's environment, which the Ray executor hides from its jobs.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from coddl.runtime.testbed.netns import LinkLimit, TestbedError, Wiring, list_namespaces, tear_down
from coddl.waiting import WaitTimeout, wait_until

RAY_PORT = 6379
DEFAULT_PREFIX = "coddl-tb"
STATE_ROOT = Path("/tmp")  # Ray's socket paths must stay short: /tmp/PREFIX-ray/...
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's minimum is 75 MiB; the testbed moves no large objects
UP_TIMEOUT_S = 120.0


MAX_SLOTS = 1024  # worker slots or Ray CPUs per node: every node is on this one machine


@dataclass(frozen=True)
class TestbedSpec:
    """How many nodes, their worker slots and CPUs, the link between them, and the namespaces' prefix."""

    __test__ = False  # not a pytest class, despite the name
    nodes: int = 2
    gpus_per_node: int = 2  # logical GPUs (Ray resources) per node: the executor's worker slots
    cpus_per_node: int = 1
    link: LinkLimit = LinkLimit()
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not 2 <= self.nodes <= 200:
            raise TestbedError(f"--nodes: expected 2 to 200 nodes, got {self.nodes}")
        if not (1 <= self.gpus_per_node <= MAX_SLOTS and 1 <= self.cpus_per_node <= MAX_SLOTS):
            raise TestbedError(f"--gpus-per-node and --cpus-per-node must be 1 to {MAX_SLOTS}")
        if not re.fullmatch(r"[A-Za-z0-9-]{1,20}", self.prefix) or not self.prefix.strip("-"):
            raise TestbedError(f"--name: expected up to 20 letters, digits or '-', got {self.prefix!r}")


@dataclass(frozen=True)
class Testbed:
    """A testbed that is up: where its nodes are and how to reach its Ray cluster."""

    spec: TestbedSpec
    ray_address: str
    temp_dir: str

    @property
    def wiring(self) -> Wiring:
        return Wiring(self.spec.prefix, self.spec.nodes)

    def node_ns(self, i: int) -> str:
        return self.wiring.node(i)

    def node_address(self, i: int) -> str:
        return self.wiring.address(i)

    def node_env(self) -> dict[str, str]:
        """The environment of every process in a node: Ray's short temp dir and its token; gloo on the
        node's link."""
        return {"RAY_TMPDIR": self.temp_dir, "GLOO_SOCKET_IFNAME": "eth0", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(auth_token_path(self.spec.prefix))}

    def to_json(self) -> str:
        d = asdict(self)
        return json.dumps(d, indent=2)


def auth_token_path(prefix: str) -> Path:
    """The testbed's Ray token, in a directory of its own that only root can enter."""
    return STATE_ROOT / f"{prefix}-auth" / "token"


def _private_dir(path: Path) -> None:
    """Make ``path`` a directory only this user can enter, or accept one an earlier testbed of this
    user left. /tmp is everyone's: another user could have made the directory (or a link by its name)
    first, and would then read the token written into it, or have root write through a planted link —
    so anything else there is refused, never chmod-ed into shape."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise TestbedError(f"{path} exists and is not a private directory of this user (another user may "
                               f"have made it): remove it and run again") from None


def _write_own(path: Path, text: str, mode: int) -> None:
    """Write ``path`` as a new file of this user: a file or link of that name that another user made
    (in /tmp) is refused rather than written through."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
            raise TestbedError(f"{path} exists and is not this user's file (another user may have made it): "
                               f"remove it and run again")
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _write_token(prefix: str) -> None:
    path = auth_token_path(prefix)
    _private_dir(path.parent)
    _write_own(path, secrets.token_hex(32), 0o600)


def state_file(prefix: str) -> Path:
    return STATE_ROOT / f"{prefix}.json"


def _read_own(path: Path) -> str:
    """``path``'s text if it is this user's own file (not a link, nor a file another user planted)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise TestbedError(f"{path} is a link, not this user's file (another user may have made it): "
                           f"remove it") from None
    with os.fdopen(fd) as f:
        if os.fstat(fd).st_uid != os.geteuid():
            raise TestbedError(f"{path} is not this user's file (another user may have made it): remove it")
        return f.read()


def _ray_cli() -> str:
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        raise TestbedError(f"{ray} not found: Ray must be installed in this environment")
    return str(ray)


def _ray_start(tb: Testbed, i: int, head: bool) -> None:
    spec = tb.spec
    args = [_ray_cli(), "start", "--node-ip-address", tb.node_address(i), f"--num-cpus={spec.cpus_per_node}",
            f"--num-gpus={spec.gpus_per_node}", f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--disable-usage-stats"]
    if head:
        args += ["--head", f"--port={RAY_PORT}", "--include-dashboard=false", f"--temp-dir={tb.temp_dir}"]
    else:
        args += [f"--address={tb.ray_address}"]
    r = subprocess.run(["ip", "netns", "exec", tb.node_ns(i), *args], capture_output=True, text=True,
                       env={**os.environ, **tb.node_env()}, timeout=UP_TIMEOUT_S)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise TestbedError(f"ray start on node {i} failed: {' | '.join(tail)}")


def _wait_for_nodes(tb: Testbed, deadline: float) -> None:
    """Until every node's raylet has registered with the head (asked from inside node 0)."""
    check = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
             "print(sum(1 for n in ray.nodes() if n['Alive']))")
    alive = 0

    def joined() -> bool:
        nonlocal alive
        r = subprocess.run(["ip", "netns", "exec", tb.node_ns(0), sys.executable, "-c", check, tb.ray_address],
                           capture_output=True, text=True, env={**os.environ, **tb.node_env()}, timeout=UP_TIMEOUT_S)
        alive = int(r.stdout.split()[-1]) if r.returncode == 0 and r.stdout.split() else 0
        return alive >= tb.spec.nodes

    try:
        wait_until(joined, deadline - time.monotonic(), "Ray nodes did not join", interval=1.0)
    except WaitTimeout:
        raise TestbedError(f"only {alive} of {tb.spec.nodes} Ray nodes joined within {UP_TIMEOUT_S:.0f} s") from None


def up(spec: TestbedSpec) -> Testbed:
    """Build the namespaces, shape the link, start Ray on every node. On any failure, tear it all down."""
    if list_namespaces(spec.prefix):
        raise TestbedError(f"a testbed named {spec.prefix!r} is already up (coddl testbed down --name {spec.prefix})")
    temp = STATE_ROOT / f"{spec.prefix}-ray"
    tb = Testbed(spec=spec, ray_address=f"{Wiring(spec.prefix, spec.nodes).address(0)}:{RAY_PORT}",
                 temp_dir=str(temp))
    deadline = time.monotonic() + UP_TIMEOUT_S
    try:
        _private_dir(temp)
        _write_token(spec.prefix)
        tb.wiring.build()
        tb.wiring.shape(spec.link)
        _ray_start(tb, 0, head=True)
        for i in range(1, spec.nodes):
            _ray_start(tb, i, head=False)
        _wait_for_nodes(tb, deadline)
        _write_own(state_file(spec.prefix), tb.to_json(), 0o644)
    except BaseException:
        down(spec.prefix)
        raise
    return tb


def load(prefix: str = DEFAULT_PREFIX) -> Testbed:
    """The testbed ``up`` started under ``prefix`` (from its state file)."""
    try:
        d = json.loads(_read_own(state_file(prefix)))
    except FileNotFoundError:
        raise TestbedError(f"no testbed named {prefix!r} is up (coddl testbed up)") from None
    spec = TestbedSpec(**{**d["spec"], "link": LinkLimit(**d["spec"]["link"])})
    return Testbed(spec=spec, ray_address=d["ray_address"], temp_dir=d["temp_dir"])


def down(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Kill the testbed's processes, delete its namespaces, links and files; the namespaces removed."""
    removed = tear_down(prefix)
    shutil.rmtree(STATE_ROOT / f"{prefix}-ray", ignore_errors=True)
    shutil.rmtree(auth_token_path(prefix).parent, ignore_errors=True)
    state_file(prefix).unlink(missing_ok=True)
    return removed

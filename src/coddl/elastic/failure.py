"""Why a worker's script failed, told to the coordinator so that a mistake is named instead of retried.

A lost worker (a process killed, a node gone) is worth replacing: the job continues on the survivors
or restarts from its checkpoint. A script that fails by itself usually is not: it fails again the
same way. So a worker whose script raised writes a ``Failure`` under ``failure/{worker}`` in its
job's store before it exits, and the coordinator (``ElasticJob``) decides:

- ``fatal`` — a mistake in the script that no restart can fix: the script ended without ever opening
  ``coddl.elastic.session()``, or broke the session's rules (``ScriptMistake``: it called
  ``optimizer.step()`` itself, the replicas' parameters drifted apart). The job fails at once, with
  the reason.
- otherwise the failure is retried like a lost worker, once: if the SAME failure — same exception
  type, raised through the same lines of code — comes back from a later generation (after the job
  regrouped or restarted), it is deterministic and the job fails with it.

A worker killed by a signal writes nothing; that is a lost worker. The record is the job's own data
and is read defensively (bounded, every field checked): a script that writes nonsense there only
makes its own job's failure message less helpful.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sysconfig
import traceback
from dataclasses import asdict, dataclass

from coddl.elastic.protocol import WorkerEnv, split_addr

MAX_RECORD = 4096
_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep  # coddl.elastic's own frames
_LIBRARIES = tuple(dict.fromkeys(os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "purelib", "platlib")))


class ScriptMistake(Exception):
    """The training script broke a rule of the session; retrying cannot help (see ``Failure.fatal``)."""


def failure_key(worker_id: str) -> str:
    return f"failure/{worker_id}"


@dataclass(frozen=True)
class Failure:
    kind: str  # "exception" | "mistake" | "no-session"
    summary: str  # one line: "RuntimeError: tiny job told to fail"
    where: str  # "train.py:31": the innermost line of the job's own code, if any
    fingerprint: str  # the exception type and every line it was raised through, hashed
    generation: int  # the membership the worker was in when it failed
    fatal: bool

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, raw: bytes | str) -> Failure | None:
        """The record, or None if it is not one a worker could have written."""
        if len(raw) > MAX_RECORD:
            return None
        try:
            d = json.loads(raw)
            f = cls(kind=str(d["kind"])[:32], summary=str(d["summary"])[:500], where=str(d["where"])[:300],
                    fingerprint=str(d["fingerprint"])[:64], generation=int(d["generation"]),
                    fatal=d["fatal"] is True)
        except (ValueError, TypeError, KeyError):
            return None
        return f if f.kind in ("exception", "mistake", "no-session") else None

    def describe(self) -> str:
        return self.summary + (f" ({self.where})" if self.where else "")

    @classmethod
    def of(cls, exc: BaseException, generation: int) -> Failure:
        frames = traceback.extract_tb(exc.__traceback__)
        theirs = [f for f in frames if not f.filename.startswith((_OURS, "<"))]
        scripts = [f for f in theirs if not f.filename.startswith(_LIBRARIES)] or theirs  # the job's own code first
        where = f"{os.path.basename(scripts[-1].filename)}:{scripts[-1].lineno}" if scripts else ""
        name = type(exc).__qualname__
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        path = "|".join(f"{f.filename}:{f.lineno}" for f in frames)
        fingerprint = hashlib.sha256(f"{type(exc).__module__}.{name}|{path}".encode()).hexdigest()[:32]
        mistake = isinstance(exc, ScriptMistake)
        return cls("mistake" if mistake else "exception", f"{name}: {message}" if message else name, where,
                   fingerprint, generation, mistake)

    @classmethod
    def no_session(cls, entry: str, generation: int) -> Failure:
        return cls("no-session", f"{entry} ended without opening coddl.elastic.session(): a coddl job's script "
                   "must train inside `with coddl.elastic.session() as s:`", "", "no-session", generation, True)


def report(env: WorkerEnv, failure: Failure) -> None:
    """Write ``failure`` to the job's store (best effort: a worker that cannot reach its store is just
    a lost worker)."""
    if env.store_addr is None or env.store_key is None:
        return
    from coddl.elastic.kvstore import KVClient  # imported here: a worker without a failure never needs it

    try:
        host, port = split_addr(env.store_addr)
        client = KVClient(host, port, env.store_key, datetime.timedelta(seconds=min(env.pg_timeout_s, 10)))
        try:
            client.set(failure_key(env.worker_id), failure.dumps())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - the store is gone (the job is being stopped): nothing to tell
        pass

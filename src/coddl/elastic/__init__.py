"""Elastic data-parallel training: the session a training script uses, and the per-job handle an
executor uses to start, resize and stop it in place. The protocol between them is documented in
``coddl.elastic.protocol``."""

from coddl.elastic.coordinator import Coordinator
from coddl.elastic.protocol import Membership, Progress, WorkerEnv
from coddl.elastic.session import Departed, Session, session

__all__ = ["Coordinator", "Departed", "Membership", "Progress", "Session", "WorkerEnv", "session"]

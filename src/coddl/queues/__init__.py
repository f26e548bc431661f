"""Teams, queues and quotas above the job policies: who belongs to which queue (``model``), how the
cluster is divided between queues (``share``), the policy over queues that runs the job policy once
per queue (``policy``), the queue file and requests (``config``) and what each queue got (``report``)."""

from coddl.queues.model import DEFAULT_QUEUE, Queue, QueueError, QueueSet, Quotas

__all__ = ["DEFAULT_QUEUE", "Queue", "QueueError", "QueueSet", "Quotas"]

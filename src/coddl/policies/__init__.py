"""Scheduling policies: one module per policy, registered by name (see ``registry``)."""

from coddl.policies.base import Context, JobsView, Policy, Shares
from coddl.policies.registry import available, make_policy, register

__all__ = ["Context", "JobsView", "Policy", "Shares", "available", "make_policy", "register"]

"""The live web dashboard served under ``/ui`` (see ``views``)."""

from coddl.runtime.dashboard.views import mount_dashboard

__all__ = ["mount_dashboard"]

"""Trace readers, validation and synthetic generators."""

from coddl.traces.model import Trace, TraceError, TraceJob

__all__ = ["Trace", "TraceError", "TraceJob"]

"""Trace readers, validation and synthetic generators."""

from coddl.traces.loader import list_bundled, load_trace
from coddl.traces.model import Trace, TraceError, TraceJob
from coddl.traces.native import write_native, write_specs
from coddl.traces.stats import TraceStats, trace_stats
from coddl.traces.synthetic import poisson_trace

__all__ = [
    "Trace", "TraceError", "TraceJob", "TraceStats", "list_bundled", "load_trace", "poisson_trace",
    "trace_stats", "write_native", "write_specs",
]

"""Placement: which GPUs on which nodes a job's share becomes."""

from coddl.placement.placer import ConsolidatingPlacer, PlacementError

__all__ = ["ConsolidatingPlacer", "PlacementError"]

"""Reproductions of published comparisons, built on the simulator."""

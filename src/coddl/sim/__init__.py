"""The trace-driven simulator: the shared scheduler core driven by virtual time."""

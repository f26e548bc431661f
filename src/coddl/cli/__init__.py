"""The ``coddl`` command."""

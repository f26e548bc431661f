"""Mistakes in how the server is started (a policy name, a GPU count, a missing Ray address): the
CLI prints them as one line and exits 2."""


class ConfigError(ValueError):
    pass

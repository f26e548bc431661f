"""Mistakes in what a user configured: a flag, a config file, a setting of the server or of the
simulator. One class for all of them (the server's, the simulator's, the CLI's), which the CLI prints
as one line and answers with exit code 2."""


class ConfigError(ValueError):
    """A setting the user gave cannot be used; the message names it and says why, in one line."""

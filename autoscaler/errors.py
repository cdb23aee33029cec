"""Errors the CLI turns into one line on stderr and exit code 2."""


class UsageError(Exception):
    """Unusable input or environment (a trace, a kubeconfig), named in one line."""

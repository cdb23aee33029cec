"""Errors the CLI turns into one line on stderr: exit 2 for what the user must fix
(settings, files, a kubeconfig), exit 1 for a failure at run time (a cluster or
Prometheus that cannot be reached)."""


class UsageError(Exception):
    """Unusable input or environment (a trace, a kubeconfig), named in one line."""


class RunFailure(Exception):
    """The command was right but the world did not answer (exit 1)."""

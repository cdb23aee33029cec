"""Errors the CLI turns into one line on stderr: exit 2 for what the user must fix
(settings, files, a kubeconfig), exit 1 for a failure at run time (a cluster or
Prometheus that cannot be reached)."""


class UsageError(Exception):
    """Unusable input or environment (a trace, a kubeconfig), named in one line."""


class RunFailure(Exception):
    """The command was right but the world did not answer (exit 1)."""


def yaml_error_line(path: object, exc: Exception, what: str = "not valid YAML") -> str:
    """A YAML error as compilers say it, in one line: `FILE:LINE:COL: what: problem`
    (PyYAML's own text spans several lines and names `<unicode string>`, not the file).
    Duck-typed on PyYAML's MarkedYAMLError so this floor imports no parser."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem is None:
        text = str(exc).strip()
        problem = text.splitlines()[0] if text else type(exc).__name__
    detail = f"{problem} ({context})" if context else str(problem)
    return f"{where}: {what}: {detail}"

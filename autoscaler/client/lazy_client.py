"""The Kubernetes client's packages, their names resolved when first used.

`kubernetes_asyncio/client/__init__.py` imports every generated API and model class of
the whole Kubernetes API: ~800 modules, ~21 MiB of a daemon whose peak RSS target is
150 MiB (docs/benchmarks.md), for the handful it uses (ApiClient,
CustomObjectsApi, CoreV1Api, CoordinationV1Api, V1Lease, ...). `install()` (called by
`autoscaler/__init__.py`, before anything imports the client) makes the four
importing packages (`kubernetes_asyncio`, `.client`, `.client.api`, `.client.models`)
resolve a name on first use: `from kubernetes_asyncio.client import ApiClient` imports
`kubernetes_asyncio.client.api_client` and nothing else, and `CustomObjectsApi` its own
module, not the 66 API classes (~12 MiB) `.client.api` imports. Every name the package's
`__init__` imports (read from its own source) and
every submodule stays reachable, as the same object; the client's deserializer
(`getattr(kubernetes_asyncio.client.models, "V1Lease")`) finds its models the same way.

A process that imported the client before `install()` keeps it as it was.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["LAZY_PACKAGES", "install"]

LAZY_PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
)


def _read_init(source: str) -> tuple[dict[str, tuple[str, str]], dict[str, Any]]:
    """Of a package's `__init__`: each name it imports -> (the module it comes from, the
    name there; "" for `import a.b as name`: a.b itself), and its literal dunder
    constants (`__version__`, `__all__`)."""
    where: dict[str, tuple[str, str]] = {}
    constants: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for alias in node.names:
                where[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    where[alias.asname] = (alias.name, "")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.startswith("__"):
                try:
                    constants[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return where, constants


class _Loader(importlib.abc.Loader):
    """Runs none of the package's `__init__`: reads which names it imports from where."""

    def __init__(self, origin: str) -> None:
        self._origin = origin

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        where, constants = _read_init(Path(self._origin).read_text(encoding="utf-8"))
        for name, value in constants.items():
            setattr(module, name, value)
        package = module.__name__

        def __getattr__(name: str) -> Any:
            if name in where:
                source, attribute = where[name]
                value: Any = importlib.import_module(source)
                value = getattr(value, attribute) if attribute else value
            elif name.startswith("__"):
                raise AttributeError(name)
            else:
                try:
                    value = importlib.import_module(f"{package}.{name}")
                except ModuleNotFoundError:
                    raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
            setattr(module, name, value)  # resolved once
            return value

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LAZY_PACKAGES:
            return None
        real = importlib.machinery.PathFinder.find_spec(fullname, path)
        if real is None or real.origin is None or real.submodule_search_locations is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname,
            real.origin,
            loader=_Loader(real.origin),
            submodule_search_locations=list(real.submodule_search_locations),
        )


def install() -> None:
    """Resolve the client packages' names lazily from now on (idempotent); nothing is
    imported here."""
    if any(name in sys.modules for name in LAZY_PACKAGES):
        return  # imported already, whole: leave it so
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

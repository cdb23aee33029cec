"""The pure core imports no I/O library (DESIGN.md floors)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FORBIDDEN = ("kubernetes_asyncio", "prometheus_api_client", "aiohttp", "structlog", "requests")


@pytest.mark.parametrize(
    "module",
    [
        "autoscaler.model",
        "autoscaler.policy",
        "autoscaler.resources",
        "autoscaler.planner",
        "autoscaler.parse",
        "autoscaler.render",
        "autoscaler.status",
        "autoscaler.sources.prom_answer",
        "autoscaler.kinds",
        "autoscaler.fields",
        "autoscaler.podspec",
        "autoscaler.fit",
        "autoscaler.payoff",
        "autoscaler.quota",
        "autoscaler.run_memory",
    ],
)
def test_pure_modules_import_no_io_library(module):
    code = (
        f"import sys, {module}; bad = [m for m in {FORBIDDEN!r} if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == "", f"{module} pulls in {out}"


# The project's own floors: a module may import only from floors below its own (and
# from its own package). Function-local imports count too: they are how a floor gets
# skipped quietly.
FLOORS: dict[int, tuple[str, ...]] = {
    # vocabulary, no logic; options: each component's section of the settings
    0: ("model", "policy", "resources", "errors", "redact", "options", "lazy_client"),
    # what Volcano binds, how queues share a cluster, in-flight workers; settings;
    # readers; pod specs and nodes as the scheduler reads them; fit by shape; whether a
    # reclaim pays
    1: (
        "headroom",
        "shares",
        "inflight",
        "settings",
        "fields",
        "podspec",
        "fit",
        "payoff",
        "quota",
    ),
    # the pure planner; where each job kind keeps its fields; the runs remembered for it
    2: ("planner", "kinds", "run_memory"),
    # reading and telling; heap: giving the C heap's free memory back
    3: ("parse", "render", "kubeapi", "metrics", "logs", "pacing", "heap"),
    # the edges; status: the status document (pure, but it tells in render's words);
    # triggers: which watch events call for an early cycle
    4: ("sources", "actuator", "leader", "server", "snapshot_file", "status", "triggers"),
    # one cycle and its driver; the status object's writer and its views for the CLI
    5: ("loop", "status_writer", "status_view"),
    6: ("wiring", "sim"),  # assembly: the one builder of the daemon's parts, the simulator
    7: ("daemon",),  # the daemon's commands: run, live plan, status
    8: ("cli",),  # the command line
    9: ("__main__",),
}
_FLOOR_OF = {name: floor for floor, names in FLOORS.items() for name in names}
PACKAGE = Path(__file__).resolve().parent.parent / "autoscaler"


def _top(module: str) -> str:
    """autoscaler.sources.kube -> sources"""
    return module.split(".")[1] if module.count(".") else ""


def _name(path: Path, root: Path = PACKAGE) -> str:
    return "autoscaler." + ".".join(path.relative_to(root).with_suffix("").parts)


def _imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """Absolute names of the autoscaler modules `path` imports."""
    here = _name(path, root)
    package = here.rsplit(".", 1)[0] if path.name != "__init__.py" else here
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names] if not node.module else [target]
            found.update(n for n in names if n.startswith("autoscaler."))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("autoscaler."))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.parts)


def test_every_module_has_a_floor():
    missing = {_top(_name(p)) for p in _modules()} - set(_FLOOR_OF) - {"", "__init__"}
    assert not missing, f"give these modules a floor in FLOORS: {sorted(missing)}"


def _violations(path: Path, root: Path = PACKAGE) -> list[str]:
    me = _top(_name(path, root))
    if me in ("", "__init__"):
        return []
    bad = []
    for target in _imports(path, root):
        other = _top(target)
        if other not in ("", me) and _FLOOR_OF[other] >= _FLOOR_OF[me]:
            bad.append(f"{target} (floor {_FLOOR_OF[other]})")
    return sorted(bad)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_floors(path):
    bad = _violations(path)
    me = _top(_name(path))
    assert not bad, f"{me} imports from its own floor or above: {bad}"


def test_the_floor_check_can_fail(tmp_path):
    """The check sees a sideways import and an upward function-local one."""
    (tmp_path / "planner.py").write_text(
        "from .model import Plan\ndef f():\n    from . import render\n    from .loop import x\n"
    )
    assert _violations(tmp_path / "planner.py", tmp_path) == [
        "autoscaler.loop (floor 5)",
        "autoscaler.render (floor 3)",
    ]


# Project rule: no function over 60 lines outside the simulator (autoscaler/sim/). A
# longer one is split into functions whose names say what they do.
MAX_FUNCTION_LINES = 60


def _long_functions(path: Path) -> list[str]:
    """`path`'s functions over MAX_FUNCTION_LINES, from `def` to their last line (nested
    functions and methods too; a nested function's lines count in its parent's)."""
    long = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                long.append((node.lineno, f"{node.name} (line {node.lineno}, {lines} lines)"))
    return [text for _, text in sorted(long)]


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if "sim" not in p.relative_to(PACKAGE).parts[:-1]],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_function_over_60_lines(path):
    long = _long_functions(path)
    assert not long, f"split into functions whose names say what they do: {long}"


def test_the_length_check_can_fail(tmp_path):
    """It sees a long method, a long async function and a long nested one; 60 lines pass."""

    def function(head: str, lines: int) -> str:  # `head` and lines - 1 statements
        return head + "\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1))

    (tmp_path / "m.py").write_text(
        function("def fits():", 60)
        + "class C:\n"
        + textwrap.indent(function("def method(self):", 61), "    ")
        + function("async def later():", 61)
        + "def outer():\n"
        + textwrap.indent(function("def inner():", 61), "    ")
    )
    assert _long_functions(tmp_path / "m.py") == [
        "method (line 62, 61 lines)",
        "later (line 123, 61 lines)",
        "outer (line 184, 62 lines)",
        "inner (line 185, 61 lines)",
    ]

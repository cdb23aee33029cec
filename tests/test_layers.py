"""The pure core imports no I/O library (DESIGN.md floors)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FORBIDDEN = ("kubernetes_asyncio", "prometheus_api_client", "aiohttp", "structlog", "requests")
PACKAGE = Path(__file__).resolve().parent.parent / "autoscaler"

# The folders that must stay pure: the vocabulary, the planner, and the readers that turn
# raw objects into records (docs/design.md "The house").
PURE = ("core", "plan", "read/parse", "read/kinds")


def _name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("autoscaler", *parts))


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.parts)


def _pure_modules() -> list[str]:
    return [
        _name(p)
        for p in _modules()
        if any(p.relative_to(PACKAGE).as_posix().startswith(f + "/") for f in PURE)
    ]


def test_the_pure_folders_have_modules():
    names = _pure_modules()
    for folder in PURE:
        assert any(n.startswith("autoscaler." + folder.replace("/", ".")) for n in names), folder


@pytest.mark.parametrize("module", _pure_modules())
def test_pure_modules_import_no_io_library(module):
    code = (
        f"import sys, {module}; bad = [m for m in {FORBIDDEN!r} if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == "", f"{module} pulls in {out}"


# The house, lowest first: a module may import from a folder on a lower floor, and inside
# its own folder from a file (or subfolder) earlier in that folder's order. plan/ and read/
# share a floor, so neither imports the other. Function-local imports count too: they are
# how a floor gets skipped quietly.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("core",),  # the shared pure vocabulary
    ("client",),  # the Kubernetes API client
    ("settings_fields",),  # the settings' fields, a group a section
    ("settings",),  # the one Settings object
    ("plan", "read"),  # deciding (pure) | the world read into a snapshot
    ("act",),  # writing the plan
    ("report",),  # telling: status, render, metrics, logs
    ("run",),  # running: one cycle, its driver, the daemon
    ("sim",),  # the simulator
    ("cli",),  # the command line
    ("__main__",),
)
# Inside a folder, lowest first (a subfolder is one entry, its files ordered in turn).
ORDER: dict[str, tuple[str, ...]] = {
    "core": ("errors", "heap", "resources", "options", "policy", "reasons", "shapes", "model"),
    "client": ("redact", "lazy_client", "kubeapi", "config"),
    "plan": (
        "fit",
        "headroom",
        "inflight",
        "payoff",
        "quota",
        "shares",
        "work",
        "listing",
        "kept",
        "cluster",
        "victims",
        "lenders",
        "state",
        "capability",
        "trim",
        "weigh",
        "reclaim",
        "gangs",
        "growth",
        "planner",
    ),
    "plan.fit": ("filters", "nodes", "placer", "room", "replay", "groups"),
    "read": (
        "fields",
        "records",
        "podspec",
        "kinds",
        "parse",
        "prometheus",
        "kube",
        "live",
        "snapshot_file",
    ),
    "read.parse": ("objects", "queues", "nodes", "jobs", "podgroups", "hpas", "assemble", "delta"),
    "read.kinds": ("gang", "base", "kubeflow", "vcjob"),
    "read.prometheus": ("answer", "source"),
    "read.kube": ("proto", "wire", "straight", "tuning", "pages", "cache", "source"),
    "act": ("pacing", "results", "events", "dry_run", "actuator"),
    "report": ("render", "metrics", "logs", "status"),
    "report.status": ("doc", "split", "codec", "build", "writer", "view"),
    "run": ("run_memory", "triggers", "server", "leader", "loop", "driver", "wiring", "daemon"),
}
_FLOOR_OF = {name: floor for floor, names in enumerate(FLOORS) for name in names}


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


def _place(module: str) -> tuple[int, ...]:
    """Where a module stands in the house: its floor, then its rank in each folder's
    order down to its own file (autoscaler.read.kube.wire -> (3, 5, 1))."""
    parts = module.split(".")[1:]
    if not parts:
        return ()
    place = [_FLOOR_OF[parts[0]]]
    for depth in range(1, len(parts)):
        order = ORDER.get(".".join(parts[:depth]))
        if order is None or parts[depth] == "__init__":
            break
        place.append(order.index(parts[depth]))
    return tuple(place)


def _violations(path: Path, root: Path = PACKAGE) -> list[str]:
    """Imports of `path` that do not point down the house."""
    me = _name(path, root)
    if me == "autoscaler" or path.name == "__init__.py":
        return []  # a package's __init__ may gather what its folder holds
    mine, my_top = _place(me), me.split(".")[1]
    bad = []
    for target in _imports(path, root):
        known = _known(target, root)
        theirs, their_top = _place(known), known.split(".")[1] if "." in known else ""
        if their_top != my_top:  # another folder: only from a lower floor
            if not theirs or theirs[0] >= mine[0]:
                bad.append(target)
            continue
        shared = 0
        while shared < min(len(mine), len(theirs)) and mine[shared] == theirs[shared]:
            shared += 1
        if shared == len(theirs):
            continue  # my own folder's package (or myself)
        if shared == len(mine) or theirs[shared] >= mine[shared]:
            bad.append(target)
    return sorted(bad)


def _known(module: str, root: Path = PACKAGE) -> str:
    """A module name cut to the part the house orders (a name imported from a module is
    the module)."""
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        candidate = ".".join(parts[:end])
        path = root.parent / candidate.replace(".", "/")
        if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
            return candidate
    return module


def test_every_folder_and_file_has_a_place():
    missing = []
    for path in _modules():
        try:
            _place(_name(path))
        except (KeyError, ValueError) as e:
            missing.append(f"{_name(path)}: {e}")
        folder = ".".join(path.relative_to(PACKAGE).parts[:-1])
        if folder and folder.split(".")[0] != "sim" and path.stem != "__init__":
            assert folder in ORDER, f"give {folder} an ORDER"
    assert not missing, f"give these a place in FLOORS/ORDER: {missing}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_house(path):
    bad = _violations(path)
    assert not bad, f"{_name(path)} imports from its own floor or above: {bad}"


def test_an_import_running_back_up_fails(tmp_path):
    """The check sees a sideways folder (plan -> read), an upward function-local import,
    a file earlier in its folder importing a later one, and lets a downward one pass."""
    root = tmp_path / "autoscaler"
    for folder in ("core", "plan", "read", "run", "report"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    for name in ("core/model", "read/parse", "run/loop", "report/render", "plan/fit"):
        (root / f"{name}.py").write_text("")
    (root / "plan" / "planner.py").write_text(
        "from autoscaler.core.model import Plan\n"
        "from autoscaler.read.parse import x\n"
        "from .fit import Placer\n"
        "def f():\n"
        "    from autoscaler.report import render\n"
        "    from autoscaler.run.loop import x\n"
    )
    (root / "plan" / "fit.py").write_text("from .planner import plan\n")
    assert _violations(root / "plan" / "planner.py", root) == [
        "autoscaler.read.parse",
        "autoscaler.report",
        "autoscaler.run.loop",
    ]
    assert _violations(root / "plan" / "fit.py", root) == ["autoscaler.plan.planner"]


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


# The house's sizes (issue #42): a file a reader can open alone, a class one can hold in
# mind. The simulator included.
MAX_FILE_LINES = 800
MAX_CLASS_LINES = 400


def _too_big(path: Path) -> list[str]:
    src = path.read_text()
    big = []
    if (n := len(src.splitlines())) > MAX_FILE_LINES:
        big.append(f"{path.name} ({n} lines)")
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ClassDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_CLASS_LINES:
                big.append(f"class {node.name} (line {node.lineno}, {lines} lines)")
    return big


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_file_over_800_lines_no_class_over_400(path):
    big = _too_big(path)
    assert not big, f"cut along its seams: {big}"


def test_the_size_check_can_fail(tmp_path):
    """A file of 801 lines and a class of 401 are seen; 800 and 400 pass."""
    (tmp_path / "ok.py").write_text("class C:\n" + "    x = 1\n" * 399 + "\n" * 400)
    (tmp_path / "big.py").write_text("class C:\n" + "    x = 1\n" * 400 + "\n" * 400)
    assert _too_big(tmp_path / "ok.py") == []
    assert _too_big(tmp_path / "big.py") == ["big.py (801 lines)", "class C (line 1, 401 lines)"]

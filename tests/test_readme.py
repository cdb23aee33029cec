"""README promises: its commands are the ones CI runs, it stays a way in (the reference
pages it links are complete: every setting, metric and reason)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from autoscaler.core.reasons import Reason
from autoscaler.report.metrics import Metrics
from autoscaler.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def _commands() -> list[str]:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", quick)


def test_exactly_two_setup_commands_and_ci_runs_the_test_one():
    commands = _commands()
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_first_command_uses_files_that_exist():
    for path in re.findall(r"(config/\S+)", _commands()[0]):
        assert (ROOT / path).exists(), path


def test_settings_page_is_generated_from_the_code():
    """docs/settings.md's table is Settings, field by field (tests/tools/settings_table.py)."""
    tool = ROOT / "tests" / "tools" / "settings_table.py"
    check = subprocess.run(
        [sys.executable, str(tool), "--check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    page = (DOCS / "settings.md").read_text()
    for name in Settings.model_fields:
        assert f"| `{name}` | `AUTOSCALER_{name.upper()}` |" in page, name


def test_every_metric_is_documented():
    page = (DOCS / "metrics.md").read_text()
    names = {m.name for m in Metrics().registry.collect()}
    for name in names:
        assert name in page, name


def test_reasons_page_has_one_row_per_reason():
    page = (DOCS / "reasons.md").read_text()
    rows = re.findall(r"^\| `([A-Za-z]+)` \|", page, flags=re.MULTILINE)
    reasons = {r.value for r in Reason}
    odd = sorted(r for r in rows if rows.count(r) > 1 or r not in reasons)
    assert sorted(rows) == sorted(reasons), (
        f"missing: {sorted(reasons - set(rows))}, unknown or twice: {odd}"
    )


def test_readme_is_a_way_in_that_links_every_reference_page():
    """A new user reads it in minutes: the reference lives in docs/, one page each."""
    assert len(README.splitlines()) < 300
    for page in ("settings", "reasons", "metrics", "snapshot", "troubleshooting", "jobs"):
        assert f"](docs/{page}.md)" in README, page
    install = README.index("## Install in a cluster")
    assert install < README.index("## The first hour") < README.index("## Which jobs are managed")
    assert README.index("helm install") < README.index("kubectl apply -k deploy/overlays/dry-run")


def test_docs_point_nowhere_outside_the_repository():
    """A clone is all a user has: no link or path out of it, no machine paths."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for bad in ("../shared", "/work/"):
            assert bad not in text, f"{doc.name} points outside the repository: {bad!r}"
        for target in re.findall(r"\]\(([^)#]+)", text):
            if "://" in target:
                continue
            path = (doc.parent / target).resolve()
            assert path.is_relative_to(ROOT), f"{doc.name} links out of the clone: {target}"
            assert path.exists(), f"{doc.name} links a missing {target}"

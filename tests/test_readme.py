"""README promises: its commands are the ones CI runs, and its references are complete."""

from __future__ import annotations

import re
from pathlib import Path

from autoscaler.metrics import Metrics
from autoscaler.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


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


def test_every_setting_is_documented_in_the_readme():
    for name in Settings.model_fields:
        assert f"`{name}`" in README and f"AUTOSCALER_{name.upper()}" in README, name


def test_every_metric_is_documented_in_the_readme():
    names = {m.name for m in Metrics().registry.collect()}
    for name in names:
        assert name in README, name


def test_docs_point_nowhere_outside_the_repository():
    """A clone is all a user has: no link or path out of it, no machine paths."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for bad in ("../shared", "/work/", "](../"):
            assert bad not in text, f"{doc.name} points outside the repository: {bad!r}"
        for target in re.findall(r"\]\(([^)#]+)", text):
            if "://" in target:
                continue
            assert (doc.parent / target).exists(), f"{doc.name} links a missing {target}"

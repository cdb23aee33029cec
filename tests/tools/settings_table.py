"""Writes the settings table of docs/settings.md from the daemon's Settings.

One row per field of autoscaler/settings.py: the YAML key, the environment variable, the
default and the field's description, so the page cannot drift from the code:

    python tests/tools/settings_table.py           # rewrite the table in docs/settings.md
    python tests/tools/settings_table.py --check   # exit 1 if it is stale (a test does)
"""

from __future__ import annotations

import argparse
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"
START, END = "<!-- settings:start -->", "<!-- settings:end -->"
sys.path.insert(0, str(ROOT))  # the repository root, for `autoscaler`

from autoscaler.settings import ENV_PREFIX, Settings  # noqa: E402


def _default(value: Any) -> str:
    """As a user writes it in the YAML file (or, for lists, as JSON in the environment)."""
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table() -> str:
    rows = ["| setting | env var | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = _default(field.get_default(call_default_factory=True))
        rows.append(
            f"| `{name}` | `{ENV_PREFIX}{name.upper()}` | `{default}` "
            f"| {_cell(field.description or '')} |"
        )
    return "\n".join(rows)


def render(page: str) -> str:
    """The page with its table between the markers replaced by the generated one."""
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args()
    page = PAGE.read_text()
    fresh = render(page)
    if args.check:
        if fresh != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python tests/tools/settings_table.py")
            return 1
        return 0
    PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

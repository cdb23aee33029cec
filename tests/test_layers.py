"""The pure core imports no I/O library (DESIGN.md floors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

FORBIDDEN = ("kubernetes_asyncio", "prometheus_api_client", "aiohttp", "structlog", "requests")


@pytest.mark.parametrize(
    "module", ["autoscaler.model", "autoscaler.planner", "autoscaler.parse", "autoscaler.render"]
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

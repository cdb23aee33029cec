"""`elastic-autoscaler plan --snapshot FILE` as a whole process on a large snapshot:
`python benchmarks/plan_snapshot.py [--jobs 10000] [--format json yaml]`.

Writes a snapshot of N realistic jobs (benchmarks/cycle.py's objects: Master and Worker
templates, managedFields, last-applied annotation) over 100 queues, then times the CLI
reading and planning it, start to exit, as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]


def main() -> int:
    from cycle import QUEUES, _jobs

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--format", nargs="+", default=["json", "yaml"])
    parser.add_argument(
        "--thin",
        action="store_true",
        help="jobs without kubectl's "
        "last-applied annotation, managedFields and a Master (~1.7 KB each)",
    )
    args = parser.parse_args()
    jobs = _jobs(args.jobs)
    if args.thin:
        for job in jobs:
            job["metadata"]["annotations"].pop(
                "kubectl.kubernetes.io/last-applied-configuration", None
            )
            job["metadata"].pop("managedFields", None)
            job["spec"]["pytorchReplicaSpecs"].pop("Master", None)
    data = {"free_gpus": {f"team-{q:03d}": 4 for q in range(QUEUES)}, "objects": jobs}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.format:
            path = Path(tmp) / f"snapshot.{fmt}"
            path.write_text(
                json.dumps(data) if fmt == "json" else yaml.safe_dump(data, sort_keys=False)
            )
            start = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "autoscaler",
                    "plan",
                    "--snapshot",
                    str(path),
                    "-o",
                    "json",
                    "--now",
                    "2026-11-22T10:00:00Z",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            took = time.perf_counter() - start
            print(
                json.dumps(
                    {
                        "jobs": args.jobs,
                        "format": fmt,
                        "mb": round(path.stat().st_size / 1e6, 1),
                        "seconds": round(took, 2),
                        "exit": proc.returncode,
                    }
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`elastic-autoscaler run | plan | simulate`.

Exit codes: 0 success, 1 runtime failure, 2 unusable input (settings, snapshot, trace).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from .errors import RunFailure, UsageError
from .fields import BadField, parse_time
from .settings import Settings, SettingsError, load_settings
from .snapshot_file import SnapshotError, load_snapshot_file


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("elastic-autoscaler")
    except PackageNotFoundError:  # run from a clone without installing
        return "(not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="elastic-autoscaler",
        description="Global planner that resizes elastic training jobs (PyTorchJob, PaddleJob, "
        "Volcano Job) into idle Volcano queue GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", type=Path, help="YAML settings file (env vars win)")

    run = sub.add_parser("run", help="run the daemon against the cluster")
    with_config(run)
    run.add_argument("--dry-run", action="store_true", help="plan and log, never write")

    plan = sub.add_parser(
        "plan", help="print the plan for a snapshot file or the live cluster; writes nothing"
    )
    with_config(plan)
    plan.add_argument(
        "--snapshot", type=Path, help="snapshot file (YAML or JSON); without it: one live cycle"
    )
    plan.add_argument("--output", "-o", choices=("table", "json"), default="table")
    plan.add_argument(
        "--now",
        help="RFC 3339 time to plan at (default: the snapshot's `now`, else the current time)",
    )
    plan.add_argument("--verbose", "-v", action="store_true", help="explain every job")

    sim = sub.add_parser(
        "simulate", help="replay a GPU-cluster trace under several policies and compare them"
    )
    with_config(sim)
    from .sim.cli import add_arguments

    add_arguments(sim)
    return parser


def _settings(args: argparse.Namespace, **overrides: object) -> Settings:
    return load_settings(getattr(args, "config", None), **overrides)


def _cmd_plan(args: argparse.Namespace) -> int:
    from .planner import plan
    from .render import plan_to_json, plan_to_table

    settings = _settings(args)
    now = None
    if args.now:
        try:
            now = parse_time(args.now, "--now")
        except BadField as exc:
            raise UsageError(str(exc)) from None
    if args.snapshot is None:
        from .daemon import live_plan  # the daemon's edges; imported only when needed

        result = live_plan(settings, now)
    else:
        snap = load_snapshot_file(args.snapshot)
        now = now or snap.now or datetime.now(UTC)
        result = plan(snap.snapshot(settings), settings.planner_policy(), now)
    out = (
        plan_to_json(result)
        if args.output == "json"
        else plan_to_table(result, verbose=args.verbose)
    )
    sys.stdout.write(out)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .daemon import run_daemon

    overrides = {"dry_run": True} if args.dry_run else {}
    settings = _settings(args, **overrides)
    return run_daemon(settings)


def _cmd_simulate(args: argparse.Namespace) -> int:
    try:
        from .sim.cli import run_simulate
    except ImportError as exc:
        raise UsageError(f"the simulator is not available: {exc}") from None
    return run_simulate(args, _settings(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = {"plan": _cmd_plan, "run": _cmd_run, "simulate": _cmd_simulate}[args.command]
    try:
        return command(args)
    except (SettingsError, SnapshotError, UsageError) as exc:
        print(f"elastic-autoscaler: error: {exc}", file=sys.stderr)
        return 2
    except RunFailure as exc:
        print(f"elastic-autoscaler: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    # `python -m autoscaler.cli`: run the imported module, so that its exception classes
    # are the ones the other modules raise
    from autoscaler.cli import main as _main

    sys.exit(_main())

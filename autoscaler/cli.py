"""`elastic-autoscaler run | plan | status | explain | simulate`, also a kubectl plugin
(`kubectl elastic ...`: the `kubectl-elastic` executable is this same program).

kubectl's conventions on every command that talks to a cluster: `--kubeconfig`,
`--context`, `-n/--namespace`, `-o` where there is output; `KUBECONFIG` as kubectl reads it.

Exit codes: 0 success, 1 runtime failure, 2 unusable input (settings, snapshot, trace,
kubeconfig, a query Prometheus refuses). Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.core.errors import RunFailure, UsageError
from autoscaler.read.fields import BadField, parse_time
from autoscaler.read.snapshot_file import SnapshotError, load_snapshot_file
from autoscaler.report.logs import configure_logging
from autoscaler.report.metrics import package_version

from .settings import Settings, SettingsError, load_settings

PROG = "elastic-autoscaler"
KUBECTL_PROG = "kubectl elastic"
OUTPUTS = ("table", "wide", "json", "yaml")


def _with_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="YAML settings file (env vars win)")


def _with_cluster(
    p: argparse.ArgumentParser, namespace_help: str, *, live_only: bool = False
) -> None:
    """kubectl's flags, for the commands that talk to a cluster, and where the metrics
    are (`live_only`: only a --live answer reads them)."""
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig file (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)",
    )
    p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument("-n", "--namespace", help=namespace_help)
    p.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="Prometheus to read the queues' metrics from (the prometheus_url setting; "
        "$AUTOSCALER_PROMETHEUS_URL)" + (" with --live" if live_only else ""),
    )


def _with_output(p: argparse.ArgumentParser, choices: Sequence[str] = OUTPUTS) -> None:
    p.add_argument("-o", "--output", choices=choices, default=choices[0], help="output format")


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Global planner that resizes elastic training jobs (PyTorchJob, PaddleJob, "
        "Volcano Job) into idle Volcano queue GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the daemon against the cluster")
    _with_config(run)
    _with_cluster(run, "manage only this namespace's jobs (the namespaces setting: several)")
    _with_daemon_namespace(run)
    run.add_argument("--dry-run", action="store_true", help="plan and log, never write")

    _add_plan(sub)
    _add_readers(sub)

    sim = sub.add_parser(
        "simulate", help="replay a GPU-cluster trace under several policies and compare them"
    )
    _with_config(sim)
    from autoscaler.sim.cli import add_arguments

    add_arguments(sim)
    return parser


def _add_plan(sub: Any) -> None:
    plan = sub.add_parser(
        "plan", help="print the plan for a snapshot file or the live cluster; writes nothing"
    )
    _with_config(plan)
    _with_cluster(plan, "plan only this namespace's jobs (live)")
    plan.add_argument(
        "--snapshot", type=Path, help="snapshot file (YAML or JSON); without it: one live cycle"
    )
    _with_output(plan)
    plan.add_argument(
        "--now",
        help="RFC 3339 time to plan at (default: the snapshot's `now`, else the current time)",
    )
    plan.add_argument(
        "--verbose", "-v", action="store_true", help="the wide table (as -o wide) with -o table"
    )


def _add_readers(sub: Any) -> None:
    """`status` and `explain`: the status object, or with --live one plan now."""
    status = sub.add_parser(
        "status",
        help="what the daemon decided last cycle: queues, headroom and what bounded it, "
        "GPUs, jobs in flight, held or refused (reads its status object)",
    )
    _with_config(status)
    _with_cluster(
        status, "show only this namespace's jobs (queues are cluster-wide)", live_only=True
    )
    _with_output(status)
    _with_source(status)

    explain = sub.add_parser(
        "explain", help="why one job has (or will get) its size: every input, in words"
    )
    _with_config(explain)
    _with_cluster(
        explain, "the job's namespace (default: the kubeconfig context's)", live_only=True
    )
    explain.add_argument("job", metavar="NAMESPACE/NAME", help="the job (or NAME with -n)")
    _with_output(explain, ("text", "json", "yaml"))
    _with_source(explain)


def _with_source(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--live",
        action="store_true",
        help="plan now from the cluster and Prometheus instead of reading the status object",
    )
    _with_daemon_namespace(p)


def _with_daemon_namespace(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--autoscaler-namespace",
        metavar="NAMESPACE",
        help="namespace of the daemon and its status object (the lease_namespace setting)",
    )


# flag (argparse's dest) -> the setting it sets
_FLAG_SETTINGS = {
    "kubeconfig": "kubeconfig",
    "context": "kube_context",
    "autoscaler_namespace": "lease_namespace",
    "prometheus_url": "prometheus_url",
}


def _settings(args: argparse.Namespace, **overrides: object) -> Settings:
    """Settings from --config and the environment; kubectl's flags win over both."""
    for dest, name in _FLAG_SETTINGS.items():
        value = getattr(args, dest, None)
        if value is not None and value != "":
            overrides[name] = value
    if getattr(args, "prometheus_url", None) and not getattr(args, "live", True):
        raise UsageError(
            "--prometheus-url applies with --live (without it the answer is the daemon's, "
            "read from its status object)"
        )
    settings = load_settings(getattr(args, "config", None), flags=overrides, **overrides)
    if args.command != "run":  # the daemon's logs are its own (JSON lines)
        configure_logging(settings, for_people=True)
    return settings


def _write(data: Any, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, width=100))


def _cmd_plan(args: argparse.Namespace) -> int:
    from autoscaler.plan.planner import plan
    from autoscaler.report.render import plan_to_dict, plan_to_table

    namespaced = {"namespaces": [args.namespace]} if args.namespace else {}
    settings = _settings(args, **namespaced)
    now = None
    if args.now:
        try:
            now = parse_time(args.now, "--now")
        except BadField as exc:
            raise UsageError(str(exc)) from None
    if args.snapshot is None:
        from autoscaler.run.daemon import (
            live_cycle,
        )  # the daemon's edges; imported only when needed

        snapshot, result = live_cycle(settings, now)
    else:
        if args.namespace or args.prometheus_url:
            flag = "-n/--namespace" if args.namespace else "--prometheus-url"
            raise UsageError(f"{flag} applies to the live cluster, not to --snapshot")
        snap = load_snapshot_file(args.snapshot)
        from autoscaler.read.parse import ignored_words

        ignored = ignored_words(snap.raw.ignored)
        if ignored:
            print(f"{PROG}: warning: {args.snapshot}: {ignored}", file=sys.stderr)
        now = now or snap.now or datetime.now(UTC)
        snapshot = snap.snapshot(settings.read_options())
        result = plan(snapshot, settings.planner_policy(), now)
    if args.output in ("json", "yaml"):
        _write(plan_to_dict(result), args.output)
    else:
        verbose = args.verbose or args.output == "wide"
        names = settings.gpu_resource_names
        sys.stdout.write(plan_to_table(result, verbose=verbose, snapshot=snapshot, gpu_names=names))
    return 0


def _status_doc(args: argparse.Namespace, settings: Settings) -> Any:
    from autoscaler.run.daemon import live_status, read_status

    return live_status(settings) if args.live else read_status(settings)


def _stale(doc: Any, settings: Settings) -> str:
    """A warning when the status is older than the daemon would let it get."""
    heartbeat = doc.heartbeat_seconds or settings.status_heartbeat_seconds
    limit = 2 * heartbeat + 2 * settings.interval_seconds
    age = (datetime.now(UTC) - doc.time).total_seconds()
    if doc.mode == "plan" or age <= limit:
        return ""
    return (
        f"{PROG}: warning: the status is {age:.0f}s old (written at most every "
        f"{heartbeat:g}s): is the daemon running and leading?"
    )


def _cmd_status(args: argparse.Namespace) -> int:
    from autoscaler.report.status.view import status_dict, status_table

    settings = _settings(args)  # -n filters what is shown: queues span namespaces
    doc = _status_doc(args, settings)
    stale = _stale(doc, settings)
    if stale:
        print(stale, file=sys.stderr)
    if args.output in ("json", "yaml"):
        _write(status_dict(doc, args.namespace), args.output)
    else:
        sys.stdout.write(status_table(doc, args.namespace, wide=args.output == "wide"))
    return 0


def _job_ref(args: argparse.Namespace, settings: Settings) -> tuple[str, str]:
    ref: str = args.job
    if ref.count("/") == 1:
        namespace, name = ref.split("/")
        if args.namespace and args.namespace != namespace:
            raise UsageError(f"{ref} names namespace {namespace}, -n says {args.namespace}")
    elif "/" in ref:
        raise UsageError(f"{ref!r} is not NAMESPACE/NAME")
    else:
        from autoscaler.client.config import context_namespace

        namespace, name = args.namespace or context_namespace(settings.kube_options()), ref
    if not namespace or not name:
        raise UsageError(f"{ref!r} is not NAMESPACE/NAME")
    return namespace, name


def _cmd_explain(args: argparse.Namespace) -> int:
    from autoscaler.report.status.view import (
        explain_dict,
        explain_gang_dict,
        explain_gang_text,
        explain_text,
        gang_of,
        not_listed,
    )

    settings = _settings(args)
    namespace, name = _job_ref(args, settings)
    doc = _status_doc(args, settings)
    stale = _stale(doc, settings)
    if stale:
        print(stale, file=sys.stderr)
    found = doc.job(namespace, name)
    gang = gang_of(doc, namespace, name) if not found else None
    if gang is not None:  # a PodGroup's name: its gang
        if args.output == "text":
            sys.stdout.write(explain_gang_text(doc, gang))
        else:
            _write(explain_gang_dict(doc, gang), args.output)
        return 0
    if not found:
        from autoscaler.run.daemon import job_kinds_named

        kinds = job_kinds_named(settings, namespace, name)
        if kinds == ():
            raise RunFailure(
                f"job {namespace}/{name}: not found (no PyTorchJob, PaddleJob or Volcano Job "
                f"of that name in namespace {namespace})"
            )
        raise RunFailure(not_listed(doc, namespace, name, kinds))
    for job in found:  # the same name in two kinds: both
        if args.output == "text":
            sys.stdout.write(explain_text(doc, job))
        else:
            _write(explain_dict(doc, job), args.output)
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from autoscaler.run.daemon import run_daemon

    overrides: dict[str, object] = {"dry_run": True} if args.dry_run else {}
    if args.namespace:
        overrides["namespaces"] = [args.namespace]
    settings = _settings(args, **overrides)
    return run_daemon(settings)


def _cmd_simulate(args: argparse.Namespace) -> int:
    try:
        from autoscaler.sim.cli import run_simulate
    except ImportError as exc:
        raise UsageError(f"the simulator is not available: {exc}") from None
    return run_simulate(args, _settings(args))


COMMANDS = {
    "plan": _cmd_plan,
    "run": _cmd_run,
    "status": _cmd_status,
    "explain": _cmd_explain,
    "simulate": _cmd_simulate,
}


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = _parser(prog).parse_args(argv)
    command = COMMANDS[args.command]
    try:
        return command(args)
    except (SettingsError, SnapshotError, UsageError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except RunFailure as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def kubectl_main() -> int:
    """`kubectl elastic ...`: kubectl runs the `kubectl-elastic` executable on PATH with
    the rest of the command line; the same commands, named as the user typed them."""
    return main(sys.argv[1:], prog=KUBECTL_PROG)


if __name__ == "__main__":  # pragma: no cover
    # `python -m autoscaler.cli`: run the imported module, so that its exception classes
    # are the ones the other modules raise
    from .cli import main as _main

    sys.exit(_main())

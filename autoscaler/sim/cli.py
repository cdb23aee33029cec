"""`elastic-autoscaler simulate`: replay a trace under several policies, print the
comparison, write JSON and plots. Called by autoscaler/cli.py."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.core.model import Plugin
from autoscaler.settings import Settings

from .engine import PLUGINS
from .nodes import read_pools
from .policies import DESCRIPTIONS, JOB_INFO, POLICIES
from .report import plot, table, write_json
from .runner import DEFAULT_RESTART_PENALTY, compare
from .traces import FORMATS, TraceOptions, read_trace
from .workload import ElasticRule, SpecError, parse_speedup_kind, with_restart_costs

DEFAULT_GPUS = 64
BUNDLED_GPUS = 32  # the bundled workload is sized for a 32-GPU cluster


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", type=Path, help="trace file (default: the small bundled workload)")
    p.add_argument(
        "--workload",
        choices=WORKLOADS,
        default=None,
        help="a bundled public trace instead of --trace: the Pollux (OSDI'21) "
        "workloads pollux-1..pollux-8 or Microsoft's philly trace",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="trace format (default: detected from the CSV header)",
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help=f"GPUs in the cluster (default {DEFAULT_GPUS}; {BUNDLED_GPUS} for the "
        "bundled workload), split over the trace's queues by their GPU-time",
    )
    p.add_argument(
        "--policies",
        nargs="+",
        default=[",".join(POLICIES)],
        help=f"policies in table order, comma- or space-separated (default {','.join(POLICIES)}"
        "). " + "; ".join(f"{name}: {what}" for name, what in DESCRIPTIONS.items()),
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("sim-out"),
        help="directory for results.json and the plots (default ./sim-out)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument("--queues", default="", help="comma-separated queues to keep (default all)")
    p.add_argument(
        "--philly-slice",
        default=None,
        metavar="START,END",
        help="jobs START..END-1 of the trace in submit order",
    )
    p.add_argument("--max-jobs", type=int, default=None, help="first N jobs only")
    p.add_argument(
        "--restart-cost",
        default=None,
        metavar="SECONDS|profile",
        help="what a restart costs every job, charged equally to every policy: a number "
        "of seconds, or 'profile': each model's cost as the Sia artifact (SOSP'23) "
        "measured it (ncf 15, deepspeech2 25, cifar10 50, yolov3 80, bert 120, imagenet "
        f"250; 30 for other jobs). Default {DEFAULT_RESTART_PENALTY:g}",
    )
    p.add_argument(
        "--restart-penalty",
        type=float,
        default=DEFAULT_RESTART_PENALTY,
        help="the older name of --restart-cost SECONDS",
    )
    p.add_argument(
        "--speedup",
        default="auto",
        help="linear | amdahl:P | measured | auto "
        "(auto: measured for pollux traces, else per-row or amdahl:0.95)",
    )
    p.add_argument(
        "--elastic-range",
        default="0.5,2",
        metavar="MIN,MAX",
        help="elastic range of jobs without one, as factors of the requested "
        "workers (default 0.5,2)",
    )
    p.add_argument(
        "--profiles",
        type=Path,
        default=None,
        help="Pollux application profiles directory (default: "
        "pollux-app-profiles next to the trace)",
    )
    p.add_argument(
        "--volcano-plugin",
        choices=[str(x) for x in PLUGINS],
        default=str(Plugin.CAPACITY),
        help="the Volcano queue plugin modelled; the simulated scheduler and the planner "
        "compute a queue's room with the daemon's headroom function. capacity (default): "
        "each queue's GPUs are its capability, no queue uses another's idle GPUs; "
        "proportion: they are its weight, and a queue may use idle GPUs of others up to "
        "its water-filled share (no reclaim action, as in Volcano's default chart)",
    )
    p.add_argument(
        "--job-info",
        choices=JOB_INFO,
        default="none",
        help="what each simulated job declares of its run to the planner, as the "
        "annotations expected-runtime-seconds and progress would: none (default: what a "
        "cluster gives by default), runtime (its work: seconds at its requested size), "
        "progress (the fraction done, to 0.01) or both; with it the planner reclaims "
        "only where it pays (reclaim_payoff_factor)",
    )
    p.add_argument(
        "--nodes",
        type=Path,
        default=None,
        metavar="FILE",
        help="node pools (CSV: pool,count,gpus,cpus,labels,taints): every pod is bound on "
        "a node the scheduler's filters admit, by the daemon's own fit; jobs' workers "
        "from the trace's cpus_per_worker, node_selector and tolerations columns. The "
        "cluster's GPUs are the pools' (default: no nodes, every GPU alike)",
    )
    p.add_argument(
        "--planner-fit",
        choices=("shape", "gpus"),
        default="shape",
        help="with --nodes, what the planner sees: shape (default: nodes' labels, taints "
        "and CPUs, each job's worker shape) or gpus (nodes as GPU counts, the rule "
        "before node fit by shape)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


class _Usage(Exception):
    """Unusable input: printed as the CLI prints its errors, exit 2."""


def _usage(message: str) -> Exception:
    return _Usage(message)


WORKLOADS = (*(f"pollux-{i}" for i in range(1, 9)), "philly")


def bundled_traces() -> Path:
    """The package's copy of the public traces (see data/traces/README.md)."""
    from importlib.resources import files

    return Path(str(files("autoscaler.sim") / "data" / "traces"))


def bundled_trace(name: str) -> Path:
    root = bundled_traces()
    if name == "philly":
        return root / "philly.csv"
    return root / "pollux-workloads" / f"workload-{name.removeprefix('pollux-')}.csv"


def _options(args: argparse.Namespace) -> tuple[TraceOptions, list[str]]:
    if args.workload is not None:
        if args.trace is not None:
            raise _usage("give --trace or --workload, not both")
        args.trace = bundled_trace(args.workload)
    try:
        parse_speedup_kind(args.speedup)
        rule = ElasticRule.parse(args.elastic_range)
    except SpecError as exc:
        raise _usage(str(exc)) from None
    slice_ = None
    if args.philly_slice:
        try:
            start, end = (int(x) for x in args.philly_slice.split(","))
        except ValueError:
            raise _usage(f"--philly-slice wants START,END, got {args.philly_slice!r}") from None
        if not 0 <= start < end:
            raise _usage("--philly-slice needs 0 <= START < END")
        slice_ = (start, end)
    if args.max_jobs is not None and args.max_jobs < 1:
        raise _usage("--max-jobs must be >= 1")
    if args.nodes is not None:
        try:
            args.pools = read_pools(args.nodes)
        except SpecError as exc:
            raise _usage(str(exc)) from None
        pool_gpus = sum(p.count * p.gpus for p in args.pools)
        if args.gpus not in (None, pool_gpus):
            raise _usage(f"--gpus {args.gpus} differs from the {pool_gpus} GPUs of --nodes")
        args.gpus = pool_gpus
    else:
        args.pools = ()
    if args.gpus is None:
        args.gpus = DEFAULT_GPUS if args.trace is not None else BUNDLED_GPUS
    if args.gpus < 1:
        raise _usage("--gpus must be >= 1")
    if args.restart_penalty < 0:
        raise _usage("--restart-penalty must be >= 0")
    if args.restart_cost is None:
        args.restart_cost = args.restart_penalty
    elif args.restart_cost != "profile":
        try:
            args.restart_cost = float(args.restart_cost)
        except ValueError:
            raise _usage(
                f"--restart-cost wants seconds or 'profile', got {args.restart_cost!r}"
            ) from None
        if not 0 <= args.restart_cost < float("inf"):
            raise _usage("--restart-cost must be a finite number of seconds >= 0")
    # "--policies a,b", "--policies a b" and "--policies 'a b'" all mean the same
    policies = [p for arg in args.policies for p in re.split(r"[,\s]+", arg) if p]
    policies = list(dict.fromkeys(policies))  # a policy named twice runs once
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise _usage(
            f"unknown policy {', '.join(unknown) or '(none)'}: choose from {', '.join(POLICIES)}"
        )
    queues = tuple(q.strip() for q in args.queues.split(",") if q.strip())
    opts = TraceOptions(
        format=args.format,
        speedup=args.speedup,
        elastic=rule,
        seed=args.seed,
        max_jobs=args.max_jobs,
        philly_slice=slice_,
        queues=queues,
        profiles_dir=args.profiles,
    )
    return opts, policies


def _optional(module: str, attribute: str) -> Any:
    """A module of the `sim` extra (plots, progress bar), or None where it is not
    installed: the daemon's image leaves the plotting stack out."""
    import importlib

    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    return getattr(found, attribute) if attribute else found


def run_simulate(args: argparse.Namespace, settings: Settings) -> int:
    try:
        return _run(args, settings)
    except _Usage as exc:
        print(f"elastic-autoscaler: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, settings: Settings) -> int:
    opts, policies = _options(args)
    try:
        workload = read_trace(args.trace, opts)
    except SpecError as exc:
        raise _usage(str(exc)) from None
    profile = args.restart_cost == "profile"
    flat = DEFAULT_RESTART_PENALTY if profile else float(args.restart_cost)
    workload = replace(
        workload,
        jobs=with_restart_costs(workload.jobs, None if profile else flat),
        restart_costs="profile" if profile else "flat",
    )
    bar = None
    tqdm = _optional("tqdm", "tqdm") if not args.no_progress and sys.stderr.isatty() else None
    if tqdm is not None:
        bar = tqdm(
            total=len(workload.jobs) * len(policies),
            unit="job",
            delay=2.0,
            file=sys.stderr,
            desc="simulating",
        )
    shown = {"": 0}  # the policy on the bar -> jobs done

    def progress(policy: str, done: int) -> None:
        if bar is None:
            return
        if policy not in shown:
            shown.clear()
            shown[policy] = 0
            bar.set_postfix_str(policy)
        if done > shown[policy]:
            bar.update(done - shown[policy])
            shown[policy] = done

    try:
        result = compare(
            workload,
            args.gpus,
            settings,
            policies,
            flat,
            args.seed,
            progress if bar is not None else None,
            Plugin(args.volcano_plugin),
            args.job_info,
            args.pools,
            args.planner_fit == "shape",
        )
    except ValueError as exc:  # a cluster too small for the trace
        raise _usage(str(exc)) from None
    finally:
        if bar is not None:
            bar.close()
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        planner = settings.model_dump(mode="json", exclude={"prometheus_password"})
        write_json(result, args.out / "results.json", planner)
        written = [args.out / "results.json"]
        if not args.no_plots and _optional("matplotlib", "") is not None:
            written += plot(result, args.out)
        elif not args.no_plots:
            print(
                "note: no plots: matplotlib is not installed (the daemon does not need "
                "it; pip install 'elastic-autoscaler[sim]' for the plots)",
                file=sys.stderr,
            )
    except OSError as exc:
        print(
            f"elastic-autoscaler: error: cannot write to {args.out}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(table(result))
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0

"""The comparison as a terminal table, a JSON document and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autoscaler.core.model import Plugin

from .metrics import utilisation_series
from .policies import DESCRIPTIONS
from .runner import Comparison
from .workload import PROFILE_FALLBACK_SECONDS, PROFILE_RESTART_SECONDS

COLUMNS = (
    ("policy", "{}"),
    ("util", "{:.1%}"),
    ("avg JCT h", "{:.2f}"),
    ("p50 JCT h", "{:.2f}"),
    ("p95 JCT h", "{:.2f}"),
    ("avg queue h", "{:.2f}"),
    ("p95 queue h", "{:.2f}"),
    ("makespan h", "{:.1f}"),
    ("restarts/job", "{:.2f}"),
    ("GPU-h used", "{:.0f}"),
    ("idle wanted GPU-h", "{:.1f}"),
)
# what each column means, printed under the table (docs/simulator.md "Metrics" says more)
LEGEND = (
    "util: GPU-time allocated / cluster GPU-time from the first submission to the last; "
    "GPU-h used: GPU-hours allocated to finish the same jobs (restart pauses included); "
    "idle wanted GPU-h: GPU-hours idle while a job of the queue waited or could have "
    "grown into them (idle GPUs no job could use are not counted)"
)


def table(c: Comparison) -> str:
    rows = []
    for name, m in c.metrics.items():
        values = (
            name,
            m.util_submitted,
            m.avg_jct / 3600,
            m.p50_jct / 3600,
            m.p95_jct / 3600,
            m.avg_queueing / 3600,
            m.p95_queueing / 3600,
            m.makespan / 3600,
            m.restarts_per_job,
            m.allocated_gpu_hours,
            m.idle_wanted_gpu_hours,
        )
        rows.append([fmt.format(v) for (_, fmt), v in zip(COLUMNS, values, strict=True)])
    heads = [h for h, _ in COLUMNS]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    line = "  ".join(
        h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(heads, widths, strict=True))
    )
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append(
            "  ".join(
                v.rjust(w) if i else v.ljust(w)
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    jobs = len(c.workload.jobs)
    head = (
        f"{c.workload.source}: {jobs} jobs, {c.gpus} GPUs in {len(c.deserved)} "
        f"queue(s), Volcano {_plugin(c)}, restart cost {_restart_costs(c)}, seed {c.seed}"
    )
    if c.pools:
        pools = ", ".join(f"{p.name} {p.count}x{p.gpus} GPUs" for p in c.pools)
        seen = "shapes" if c.planner_sees_shapes else "GPU counts alone"
        head += f", node pools {pools} (the planner sees {seen})"
    if c.job_info != "none":
        head += f", jobs declare their {_DECLARED[c.job_info]} to the planner"
    notes = [f"note: {n}" for n in c.workload.notes]
    legend = LEGEND
    # which Volcano each baseline stands for, so nobody reads them as the same thing
    baselines = [
        f"{name}: {DESCRIPTIONS[name]}" for name in c.metrics if name.startswith("volcano-")
    ]
    return "\n".join([head, *notes, *out, legend, *baselines]) + "\n"


_DECLARED = {"runtime": "run time", "progress": "progress", "both": "run time and progress"}


def _plugin(c: Comparison) -> str:
    """The queue plugin modelled, and what the queues' GPUs are under it."""
    if c.plugin is Plugin.PROPORTION:
        return "proportion plugin (queue weights; idle GPUs shared)"
    return "capacity plugin (queue capabilities; no sharing)"


def to_json(c: Comparison, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "workload": {
            "source": c.workload.source,
            "jobs": len(c.workload.jobs),
            "notes": list(c.workload.notes),
        },
        "cluster": {
            "gpus": c.gpus,
            "deserved": dict(sorted(c.deserved.items())),
            "volcano_plugin": str(c.plugin),
            "node_pools": [
                {
                    "pool": p.name,
                    "count": p.count,
                    "gpus": p.gpus,
                    "cpus": p.cpus,
                    "labels": dict(p.labels),
                    "taints": [str(t) for t in p.taints],
                }
                for p in c.pools
            ],
            "planner_fit": "shape" if c.planner_sees_shapes else "gpus",
        },
        "restart_penalty_seconds": c.restart_penalty,
        "restart_cost": _restart_costs(c),
        "restart_cost_mode": c.workload.restart_costs or None,  # flat | profile
        "job_info": c.job_info,  # what jobs declare of their run to the planner
        "seed": c.seed,
        "planner_settings": settings or {},
        "policies": {
            name: m.to_json() | {"unbound_asks": c.runs[name].unbound_asks}
            for name, m in c.metrics.items()
        },
        "jobs": {
            name: [
                {
                    "name": j.name,
                    "queue": j.queue,
                    "application": j.spec.application or None,
                    "priority": j.spec.priority,
                    "submit": j.spec.submit,
                    "first_start": j.first_start,
                    "finish": j.finish,
                    "restarts": j.restarts,
                    "restart_cost_seconds": j.spec.restart_cost,
                    "gpu_seconds": round(j.gpu_seconds, 3),
                }
                for j in run.jobs
            ]
            for name, run in c.runs.items()
        },
    }


def write_json(c: Comparison, path: Path, settings: dict[str, Any] | None = None) -> None:
    path.write_text(
        json.dumps(to_json(c, settings), indent=1, sort_keys=False) + "\n", encoding="utf-8"
    )


def plot(c: Comparison, out: Path) -> list[Path]:
    """utilisation.png, jct-cdf.png, queueing-cdf.png and summary.png in `out`."""

    import matplotlib

    matplotlib.use("Agg")

    paths = [_save(utilisation_figure(c), out / "utilisation.png")]
    for key, fname in (("jct", "jct-cdf.png"), ("queueing", "queueing-cdf.png")):
        paths.append(_save(cdf_figure(c, key), out / fname))
    paths.append(plot_summary(c, out))
    return paths


# bins of utilisation_series averaged by the smoothed line (the series has 200 bins over
# the makespan: 9 is about a twentieth of it, enough to read a trend, not to hide one)
SMOOTH_BINS = 9


def smoothed(ys: list[float], bins: int = SMOOTH_BINS) -> list[float]:
    """Centred moving average, the window shrunk at the ends (no padding, no lag)."""
    half = bins // 2
    out = []
    for i in range(len(ys)):
        window = ys[max(0, i - half) : i + half + 1]
        out.append(sum(window) / len(window))
    return out


def utilisation_figure(c: Comparison) -> Any:
    """One panel per policy, one above the other on the same axes (small multiples): the
    allocated share per bin, shaded, and its moving average; the policy and its `util`
    (the table's) are the panel's label, the legend sits below the panels, off the data."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    names = list(c.runs)
    fig, axes = plt.subplots(
        len(names),
        1,
        figsize=(9, 1.0 + 1.05 * len(names)),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    last_submit = max((j.submit for j in c.workload.jobs), default=0.0) / 3600
    for i, (ax, name) in enumerate(zip(axes[:, 0], names, strict=True)):
        xs, ys = utilisation_series(c.runs[name])
        color = f"C{i}"
        ax.fill_between(xs, ys, step="mid", color=color, alpha=0.25, linewidth=0)
        ax.plot(xs, smoothed(ys), color=color, linewidth=1.6)
        # `util` in the table is over the submission window: mark where it ends
        ax.axvline(last_submit, color="grey", linestyle="--", linewidth=0.8)
        util = c.metrics[name].util_submitted if name in c.metrics else None
        label = name if util is None else f"{name}\nutil {util:.0%}"
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9)
        ax.set_ylim(0, 1.05)
        ax.set_yticks([0, 0.5, 1])
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (h)")
    fig.suptitle(f"Allocated GPUs / capacity over time ({c.gpus} GPUs), one panel per policy")
    fig.legend(
        handles=_utilisation_keys(),
        loc="outside lower center",
        ncols=3,
        fontsize=8,
        frameon=False,
    )
    return fig


def _utilisation_keys() -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return [
        Patch(color="grey", alpha=0.25, label="allocated, per bin (makespan / 200)"),
        Line2D([], [], color="grey", linewidth=1.6, label=f"moving average ({SMOOTH_BINS} bins)"),
        Line2D([], [], color="grey", linestyle="--", linewidth=0.8, label="last submission"),
    ]


_CDF_TITLES = {
    "jct": "job completion time (submit to finish)",
    "queueing": "queueing delay (submit to first start)",
}


def cdf_values(c: Comparison, key: str) -> dict[str, list[float]]:
    """Per policy, the sorted hours of `key` (jct or queueing) of the jobs that have one."""
    values = {}
    for name, run in c.runs.items():
        if key == "jct":
            found = ((j.finish - j.spec.submit) for j in run.jobs if j.finish is not None)
        else:
            found = ((j.first_start - j.spec.submit) for j in run.jobs if j.first_start is not None)
        values[name] = sorted(v / 3600 for v in found)
    return values


def cdf_figure(c: Comparison, key: str) -> Any:
    """The CDF of `key` per policy. The x axis starts where the data does: on a log scale
    from the smallest value when every value is positive and they span a wide range,
    else linear from the smallest (0 when some job never waited). The legend is beside
    the axes, off the curves."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    title = _CDF_TITLES[key]
    values = cdf_values(c, key)
    every = [v for vs in values.values() for v in vs]
    fig, ax = plt.subplots(figsize=(8.5, 4.5), layout="constrained")
    for i, (name, vals) in enumerate(values.items()):
        n = len(vals)
        if n:
            ys = [(k + 1) / n for k in range(n)]
            ax.step(vals, ys, where="post", label=name, linewidth=1.4, color=f"C{i}")
    if every:
        lo, hi = min(every), max(every)
        if lo > 0 and hi / lo >= 20:
            ax.set_xscale("log")
            ax.set_xlim(lo, hi * 1.1)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            ax.set_xlim(lo, hi + (hi - lo) * 0.02 or 1.0)
    ax.set_ylim(0, 1.0)
    ax.set_xlabel(f"{title} (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"CDF of {title}")
    ax.grid(alpha=0.3, which="both")
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)
    return fig


def plot_summary(c: Comparison, out: Path) -> Path:
    """summary.png: average JCT, p95 queueing and restarts per job, a bar per policy."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(c.metrics)
    panels = (
        ("average JCT (h)", [c.metrics[n].avg_jct / 3600 for n in names]),
        ("p95 queueing (h)", [c.metrics[n].p95_queueing / 3600 for n in names]),
        ("restarts per job", [c.metrics[n].restarts_per_job for n in names]),
    )
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, (title, values) in zip(axes, panels, strict=True):
        bars = ax.bar(names, values, color=[f"C{i}" for i in range(len(names))])
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(
        f"{c.workload.source.rsplit('/', 1)[-1]}: {len(c.workload.jobs)} jobs, {c.gpus} GPUs",
        fontsize=10,
    )
    return _save(fig, out / "summary.png")


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:  # constrained figures place their legends themselves
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _restart_costs(c: Comparison) -> str:
    """The mode and its numbers as the CLI set them; for a workload that does not say,
    `30s` when every job pays the same, else the range and that it is per model."""
    if c.workload.restart_costs == "profile":
        models = ", ".join(f"{m} {s:g}s" for m, s in PROFILE_RESTART_SECONDS.items())
        unknown = sum(1 for j in c.workload.jobs if j.application not in PROFILE_RESTART_SECONDS)
        return (
            f"per model (profile, Sia SOSP'23: {models}; {unknown} job(s) of no known "
            f"model: {PROFILE_FALLBACK_SECONDS:g}s fallback)"
        )
    costs = sorted({j.restart_cost for j in c.workload.jobs if j.restart_cost is not None})
    if c.workload.restart_costs == "flat":
        return f"{costs[0] if costs else c.restart_penalty:g}s per restart (flat)"
    if len(costs) <= 1:
        return f"{costs[0] if costs else c.restart_penalty:g}s"
    return f"per model {costs[0]:g}-{costs[-1]:g}s (Sia profile)"

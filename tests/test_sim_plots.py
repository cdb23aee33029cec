"""The simulator's plots, read at a glance (issue 31): utilisation as one panel per
policy with its label and `util` beside it and the legend off the data; CDFs whose x
axis starts where the data does. Rendered for real (Agg) and inspected as Figures, then
as the PNGs `simulate` writes."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.image as mpimg
import matplotlib.pyplot as plt

from autoscaler.settings import Settings
from autoscaler.sim.report import (
    cdf_figure,
    cdf_values,
    plot,
    smoothed,
    utilisation_figure,
)
from autoscaler.sim.runner import Comparison, compare
from autoscaler.sim.traces import TraceOptions, read_trace

POLICIES = ("static", "volcano-default", "planner")


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    workload = read_trace(None, TraceOptions(max_jobs=40))
    return compare(workload, 32, Settings(), policies=POLICIES)


def _boxes(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax.get_window_extent(renderer) for ax in fig.axes]
    legends = [legend.get_window_extent(renderer) for legend in fig.legends]
    return axes, legends


def test_utilisation_is_one_labelled_panel_per_policy_with_the_legend_off_the_data(
    comparison,
) -> None:
    fig = utilisation_figure(comparison)
    try:
        assert len(fig.axes) == len(POLICIES)
        for ax, name in zip(fig.axes, POLICIES, strict=True):
            label = ax.get_ylabel()
            util = comparison.metrics[name].util_submitted
            assert label.startswith(name) and f"util {util:.0%}" in label, label
            assert ax.get_ylim() == (0, 1.05)
        shared = {ax.get_xlim() for ax in fig.axes}
        assert len(shared) == 1  # one time axis: the panels compare at a glance
        axes, legends = _boxes(fig)
        assert legends, "no legend"
        texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
        assert any("moving average" in t for t in texts) and "last submission" in texts
        for legend in legends:
            assert not any(legend.overlaps(box) for box in axes), "the legend covers a panel"
    finally:
        plt.close(fig)


@pytest.mark.parametrize("key", ["jct", "queueing"])
def test_cdf_axes_start_where_the_data_does(comparison, key: str) -> None:
    values = cdf_values(comparison, key)
    every = [v for vs in values.values() for v in vs]
    fig = cdf_figure(comparison, key)
    try:
        (ax,) = fig.axes
        left = ax.get_xlim()[0]
        assert left == pytest.approx(min(every)), (left, min(every))
        assert ax.get_xscale() in ("log", "linear")
        if ax.get_xscale() == "log":
            assert min(every) > 0
        fig.canvas.draw()
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert ticks and (ax.get_xscale() == "linear" or "0" not in ticks), ticks
        labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
        assert labels == set(POLICIES)
        axes, legends = _boxes(fig)
        assert not any(legend.overlaps(axes[0]) for legend in legends)
    finally:
        plt.close(fig)


def test_simulate_writes_the_plots_at_their_size(comparison, tmp_path: Path) -> None:
    paths = {p.name: p for p in plot(comparison, tmp_path)}
    assert set(paths) == {"utilisation.png", "jct-cdf.png", "queueing-cdf.png", "summary.png"}
    for path in paths.values():
        assert path.stat().st_size > 10_000, path
    height, width, _ = mpimg.imread(paths["utilisation.png"]).shape
    # 110 dpi: 9 in wide, a panel per policy (about 1 in each) plus title and legend
    assert width == 990 and abs(height - (1.0 + 1.05 * len(POLICIES)) * 110) <= 1
    height, width, _ = mpimg.imread(paths["jct-cdf.png"]).shape
    assert (width, height) == (935, 495)


def test_the_moving_average_keeps_length_and_level() -> None:
    assert smoothed([0.0, 1.0, 0.0, 1.0, 0.0], bins=3) == [0.5, 1 / 3, 2 / 3, 1 / 3, 0.5]
    assert smoothed([0.4] * 10) == pytest.approx([0.4] * 10)
    assert smoothed([]) == []

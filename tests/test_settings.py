"""Settings: env over file over defaults; bad values name the field."""

from __future__ import annotations

import pytest

from autoscaler.settings import Settings, SettingsError, load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    import os

    for key in list(os.environ):
        if key.startswith("AUTOSCALER_"):
            monkeypatch.delenv(key)


def test_defaults_match_the_documented_policy():
    s = load_settings()
    assert (
        s.cooldown_seconds,
        s.reclaim_cooldown_seconds,
        s.max_gang_wait_seconds,
        s.unplaced_timeout_seconds,
    ) == (300, 60, 1800, 300)
    assert s.growth_policy == "fill" and s.min_step_workers == 1
    assert s.reserve_gpus_per_queue == 0 and s.gpu_resource_names == ["nvidia.com/gpu"]
    assert s.annotation_prefix == "elastic-autoscaler.io" and s.interval_seconds == 120
    assert s.annotations.last_scale == "elastic-autoscaler.io/last-scale-time"


def test_env_over_file_over_defaults(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cooldown_seconds: 50\nmin_step_workers: 2\ngrowth_policy: fair\n")
    monkeypatch.setenv("AUTOSCALER_COOLDOWN_SECONDS", "0")
    monkeypatch.setenv(
        "AUTOSCALER_GPU_RESOURCE_NAMES", '["nvidia.com/gpu","baidu.com/a800_80g_cgpu"]'
    )
    s = load_settings(cfg)
    assert s.cooldown_seconds == 0 and s.min_step_workers == 2 and s.growth_policy == "fair"
    assert s.gpu_resource_names == ["nvidia.com/gpu", "baidu.com/a800_80g_cgpu"]


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"AUTOSCALER_COOLDOWN_SECONDS": "-1"}, "cooldown_seconds"),
        ({"AUTOSCALER_GROWTH_POLICY": "greedy"}, "growth_policy"),
        ({"AUTOSCALER_MIN_STEP_WORKERS": "0"}, "min_step_workers"),
        ({"AUTOSCALER_GPU_RESOURCE_NAMES": "nvidia.com/gpu"}, "gpu_resource_names"),
        ({"AUTOSCALER_GPU_RESOURCE_NAMES": '["gpu"]'}, "gpu_resource_names"),
        ({"AUTOSCALER_METRIC_UNIT_DIVISOR": "0"}, "metric_unit_divisor"),
        ({"AUTOSCALER_LOG_LEVEL": "loud"}, "log_level"),
    ],
)
def test_invalid_settings_name_the_field(monkeypatch, env, field):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SettingsError, match=field):
        load_settings()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("bogus: 1\n", "unknown setting(s): bogus"),
        ("[1, 2]\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
        ("cooldown_seconds: soon\n", "cooldown_seconds"),
    ],
)
def test_bad_config_files(tmp_path, text, needle):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(SettingsError) as err:
        load_settings(cfg)
    assert needle in str(err.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml")


def test_every_field_is_documented():
    for name, field in Settings.model_fields.items():
        assert field.description and len(field.description) > 10, name


def test_example_config_loads():
    from pathlib import Path

    s = load_settings(Path(__file__).resolve().parent.parent / "config" / "example.yaml")
    assert s.interval_seconds > 0


def test_planner_policy_defaults_are_the_settings_defaults():
    """PlannerPolicy's defaults must not drift from the documented Settings defaults."""
    from autoscaler.core.policy import PlannerPolicy

    assert Settings().planner_policy() == PlannerPolicy()
    custom = Settings(growth_policy="fair", cooldown_seconds=7).planner_policy()
    assert custom.cooldown_seconds == 7 and custom.growth_policy == "fair"


def test_each_component_gets_its_own_frozen_section():
    """Sections are cut from the one Settings by field name (options.py): each holds
    the settings of the same names, frozen (lists as tuples), and nothing else."""
    import dataclasses

    from autoscaler.core.options import LeaderOptions

    s = Settings(
        namespaces=["a", "b"],
        prometheus_retries=5,
        lease_name="mine",
        listen_port=9999,
        annotation_prefix="example.com",
    )
    sections = [
        s.prometheus_options(),
        s.kube_options(),
        s.actuator_options(),
        s.leader_options(),
        s.loop_options(),
        s.status_options(),
        s.server_options(),
        s.read_options(),
        s.source_options(),
    ]
    for section in sections:
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            assert not isinstance(value, list), (type(section).__name__, f.name)
            if f.name in Settings.model_fields and f.name != "leader_election":
                own = getattr(s, f.name)
                assert value == (tuple(own) if isinstance(own, list) else own), f.name
            else:  # derived at the edge: the annotation names, whether to elect, a part
                assert f.name in ("annotations", "leader_election", "read"), f.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, dataclasses.fields(section)[0].name, None)
    assert s.kube_options().namespaces == ("a", "b")
    assert s.actuator_options().annotations.last_scale == "example.com/last-scale-time"
    assert s.read_options().annotations.paused == "example.com/paused"
    assert s.source_options().read == s.read_options()
    # the switch, written once: a dry run never elects (it writes nothing, the Lease too)
    assert s.leader_options().leader_election is True
    assert Settings(dry_run=True).leader_options().leader_election is False
    assert Settings(leader_election=False).leader_options().leader_election is False
    # and the lease check, written once: the settings and a section refuse the same
    with pytest.raises(ValueError, match="lease_renew_deadline_seconds must be below"):
        dataclasses.replace(s.leader_options(), lease_renew_deadline_seconds=99)
    assert isinstance(s.leader_options(), LeaderOptions)


def test_annotation_names_have_one_home():
    """Every annotation of ours is named in options.Annotations; the kinds and the
    actuator read them from there (grep finds the suffixes in no other module)."""
    import pathlib
    import re

    from autoscaler.core.options import Annotations

    names = Annotations("p")
    suffixes = [
        getattr(names, n).removeprefix("p/")
        for n in dir(Annotations)
        if isinstance(getattr(Annotations, n), property)
    ]
    assert len(suffixes) == 9
    package = pathlib.Path(__file__).resolve().parent.parent / "autoscaler"
    for path in package.rglob("*.py"):
        if path.name == "options.py":
            continue
        code = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        for suffix in suffixes:
            assert not re.search(rf'f?"[^"\n]*/{suffix}"', code), (path.name, suffix)


VENDOR = "baidu.com/a800_80g_cgpu"


@pytest.mark.parametrize(
    ("names", "label"),
    [
        (["nvidia.com/gpu"], '{resource="nvidia.com/gpu"}'),
        ([VENDOR], '{resource="baidu.com/a800_80g_cgpu"}'),
        (
            [VENDOR, "nvidia.com/gpu"],
            '{resource=~"baidu\\\\.com/a800_80g_cgpu|nvidia\\\\.com/gpu"}',
        ),
    ],
    ids=["default", "vendor", "both"],
)
def test_the_series_selectors_follow_gpu_resource_names(names, label):
    """One setting names a vendor GPU for everything that reads GPUs: Volcano labels a
    queue's scalar series by resource name, so the selectors left at their defaults
    match the names of gpu_resource_names (several summed by queue, dots escaped in the
    regex); one set by hand is kept as written."""
    options = Settings(gpu_resource_names=names).prometheus_options()
    for part in ("deserved", "allocated", "request", "inqueue", "real_capacity"):
        selector = getattr(options, f"{part}_gpus_series")
        assert selector == f"volcano_queue_{part}_scalar_resources{label}"
    custom = 'sum by (queue_name) (my_allocated{gpu="a800"})'
    kept = Settings(gpu_resource_names=[VENDOR], allocated_gpus_series=custom)
    assert kept.prometheus_options().allocated_gpus_series == custom
    assert VENDOR in kept.prometheus_options().request_gpus_series

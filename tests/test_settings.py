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
    assert s.last_scale_annotation == "elastic-autoscaler.io/last-scale-time"


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
    from autoscaler.policy import PlannerPolicy

    assert Settings().planner_policy() == PlannerPolicy()
    custom = Settings(growth_policy="fair", cooldown_seconds=7).planner_policy()
    assert custom.cooldown_seconds == 7 and custom.growth_policy == "fair"

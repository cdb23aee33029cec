"""The one settings object. Sources, highest first: environment variables
(`AUTOSCALER_<FIELD>`), the YAML file given with `--config`, defaults.

Every field is flat, so each is one environment variable; lists are JSON, e.g.
`AUTOSCALER_GPU_RESOURCE_NAMES='["nvidia.com/gpu","baidu.com/a800_80g_cgpu"]'`.
Invalid settings raise `SettingsError` naming the field; the CLI stops with exit 2.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import yaml
from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from autoscaler.core.errors import yaml_error_line
from autoscaler.core.options import (
    ActuatorOptions,
    Annotations,
    KubeOptions,
    LeaderOptions,
    LoopOptions,
    PrometheusOptions,
    ReadOptions,
    ServerOptions,
    SourceOptions,
    StatusOptions,
)
from autoscaler.core.policy import PlannerPolicy
from autoscaler.settings_fields import (
    DEFAULT_SERIES,
    ENV_PREFIX,
    GPU_LABEL,
    LogFormat,
    _KubeFields,
    _LeaderFields,
    _LoopFields,
    _PlannerFields,
    _PrometheusFields,
    _ServerFields,
    _StatusFields,
)

__all__ = ["ENV_PREFIX", "LogFormat", "Settings", "SettingsError", "load_settings"]


class SettingsError(ValueError):
    """Settings that cannot run; the message names the field and the source to fix."""


class Settings(
    _ServerFields,
    _StatusFields,
    _LeaderFields,
    _LoopFields,
    _KubeFields,
    _PrometheusFields,
    _PlannerFields,
    BaseSettings,
):
    """Every setting of the daemon, flat: one YAML key and one `AUTOSCALER_<FIELD>`
    variable each. Its fields are declared by section (one `_*Fields` group a section, in
    the order the docs list them); each component gets its section as a frozen options
    object built here (`kube_options()`, `planner_policy()`, ...), and reads nothing else."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="forbid",
        validate_default=True,
    )
    _config_path: ClassVar[str | None] = None  # set by load_settings on a subclass
    _flags_given: ClassVar[frozenset[str]] = frozenset()  # the fields a CLI flag set

    def origin(self, name: str) -> str:
        """Where the value of setting `name` came from, as a user would change it: its
        flag, its variable, the settings file's key, or the default."""
        if name in self._flags_given and name in FLAGS:
            return FLAGS[name]
        env = f"{ENV_PREFIX}{name.upper()}"
        if any(k.upper() == env for k in os.environ):
            return env
        if self._config_path is not None and name in _file_keys(Path(self._config_path)):
            return f"{self._config_path} key {name}"
        return "the default"

    def named(self, name: str) -> str:
        """The setting in words for an error line: its name, where its value came from,
        and what sets it (`prometheus_url from the default; --prometheus-url or
        AUTOSCALER_PROMETHEUS_URL sets it`)."""
        setters = [FLAGS[name]] if name in FLAGS else []
        setters += [f"{ENV_PREFIX}{name.upper()}"]
        return f"{name} from {self.origin(name)}; {' or '.join(setters)} sets it"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls))

    # ---- the sections: each component's part, built here at the edge ----------------

    def _section(self, cls: type[_S], **given: Any) -> _S:
        """`cls` from the settings of the same names (lists as tuples: sections are
        frozen), but for the fields `given`."""
        names = [f.name for f in fields(cls) if f.name not in given]
        values = {n: getattr(self, n) for n in names}
        values = {n: tuple(v) if isinstance(v, list) else v for n, v in values.items()}
        return cls(**values, **given)

    def planner_policy(self) -> PlannerPolicy:
        """The planner's part of these settings: what `plan()` reads."""
        return self._section(PlannerPolicy)

    @property
    def annotations(self) -> Annotations:
        return Annotations(self.annotation_prefix)

    def read_options(self) -> ReadOptions:
        return self._section(ReadOptions, annotations=self.annotations)

    def source_options(self) -> SourceOptions:
        return self._section(SourceOptions, read=self.read_options())

    def prometheus_options(self) -> PrometheusOptions:
        return self._section(PrometheusOptions, **self.gpu_series())

    def gpu_series(self) -> dict[str, str]:
        """The five series selectors as the source reads them: each left at its default
        follows `gpu_resource_names` (Volcano labels a queue's scalar series by resource
        name, so a vendor GPU's are `resource="baidu.com/a800_80g_cgpu"`, and the
        default's nvidia.com/gpu finds none of them); one set otherwise is kept."""
        names = self.gpu_resource_names
        if names == ["nvidia.com/gpu"]:
            label = GPU_LABEL
        elif len(names) == 1:
            label = f'{{resource="{names[0]}"}}'
        else:  # summed by queue, as the pods' GPUs of several names are
            alternatives = "|".join(n.replace(".", "\\\\.") for n in names)
            label = f'{{resource=~"{alternatives}"}}'
        return {
            name: default.replace(GPU_LABEL, label) if value == default else value
            for name, default in DEFAULT_SERIES.items()
            if (value := getattr(self, name)) is not None
        }

    def kube_options(self) -> KubeOptions:
        return self._section(KubeOptions)

    def actuator_options(self) -> ActuatorOptions:
        return self._section(ActuatorOptions, annotations=self.annotations)

    def leader_options(self) -> LeaderOptions:
        # the one place that says when to elect: a dry run writes nothing, the Lease
        # included
        return self._section(LeaderOptions, leader_election=self.elects_leader)

    @property
    def elects_leader(self) -> bool:
        return self.leader_election and not self.dry_run

    def loop_options(self) -> LoopOptions:
        return self._section(LoopOptions)

    def status_options(self) -> StatusOptions:
        return self._section(StatusOptions)

    def server_options(self) -> ServerOptions:
        return self._section(ServerOptions)


if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_S = TypeVar("_S", bound="DataclassInstance")  # a section: a dataclass


class _YamlSource(PydanticBaseSettingsSource):
    """The `--config` file: a flat mapping of field names, lowest priority but defaults."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole mapping

    def __call__(self) -> dict[str, Any]:
        path = getattr(self.settings_cls, "_config_path", None)
        if path is None:
            return {}
        return read_config_file(Path(path))


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"config file {path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SettingsError(
            f"config file {path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start})"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(yaml_error_line(path, exc, "config file not valid YAML")) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: must be a mapping of setting: value")
    unknown = sorted(str(k) for k in data if k not in Settings.model_fields)
    if unknown:
        words = _did_you_mean(unknown, Settings.model_fields)
        raise SettingsError(
            f"config file {path}: unknown setting(s): {words}; settings are the field names "
            "of docs/settings.md"
        )
    return data


def _did_you_mean(unknown: list[str], known: Iterable[str]) -> str:
    """Each unknown name with the closest known one, as `name (did you mean other?)`: the
    same hint for a key of the --config file as for an AUTOSCALER_* variable."""
    names = sorted(known)
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, names, n=1)
        if not close:  # a key typed in the variable's spelling: cooldown-seconds, COOLDOWN
            folded = {n.lower().replace("_", "-"): n for n in names}
            close = difflib.get_close_matches(name.lower().replace("_", "-"), folded, n=1)
            close = [folded[c] for c in close]
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return ", ".join(parts)


# The CLI flag of each setting that has one (kubectl's names where kubectl has the flag):
# an error about a setting names the flag that sets it too.
FLAGS = {
    "prometheus_url": "--prometheus-url",
    "kubeconfig": "--kubeconfig",
    "kube_context": "--context",
    "namespaces": "-n/--namespace",
    "lease_namespace": "--autoscaler-namespace",
    "dry_run": "--dry-run",
}


def _file_keys(path: Path) -> set[str]:
    try:
        return set(read_config_file(path))
    except SettingsError:
        return set()


def load_settings(
    config: Path | None = None, *, flags: Iterable[str] = (), **overrides: Any
) -> Settings:
    """Settings from env over `config` over defaults; `overrides` (CLI flags) win.
    `flags`: the names of the overrides a flag set (Settings.origin says so)."""

    check_environment(os.environ)
    cls: type[Settings] = Settings
    given = frozenset(flags)
    if config is not None or given:
        if config is not None:
            read_config_file(config)  # fail early with a message about the file itself
        path = str(config) if config is not None else None
        cls = type("Settings", (Settings,), {"_config_path": path, "_flags_given": given})
    try:
        return cls(**overrides)
    except ValidationError as exc:
        from_file = set(read_config_file(config)) if config is not None else set()
        raise SettingsError(describe_validation_error(exc, config, from_file)) from None
    except SourceError as exc:  # e.g. a list setting whose env var is not JSON
        raise SettingsError(f"{exc} (lists are JSON, e.g. '[\"nvidia.com/gpu\"]')") from None


# Names that are ours by prefix but not settings: the variables Kubernetes injects for a
# Service named `autoscaler` in the pod's namespace (service links), which a user may not
# control. Settings never end in these shapes.
_SERVICE_LINK = re.compile(
    r"AUTOSCALER_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_\w+)?)?)"
)
# Variables of settings renamed or removed, still accepted so that an old Deployment keeps
# starting: old name -> what replaced it. None so far; a rename adds its old name here.
DEPRECATED_ENV: dict[str, str] = {}


def env_names() -> set[str]:
    """The environment variables that are settings (upper case)."""
    return {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}


def check_environment(environ: Any) -> None:
    """An `AUTOSCALER_*` variable that names no setting is an error, as an unknown key of
    the --config file is: a typo must not silently fall back to the default. Matched
    without case, as pydantic-settings reads them."""
    known = env_names() | set(DEPRECATED_ENV)
    unknown = sorted(
        name
        for name in environ
        if name.upper().startswith(ENV_PREFIX)
        and name.upper() not in known
        and not _SERVICE_LINK.fullmatch(name.upper())
    )
    if not unknown:
        return
    raise SettingsError(
        f"unknown environment variable(s): {_did_you_mean(unknown, known)}; settings are "
        f"{ENV_PREFIX}<FIELD> (docs/settings.md)"
    )


def describe_validation_error(
    exc: ValidationError,
    config: Path | None = None,
    from_file: set[str] | frozenset[str] = frozenset(),
) -> str:
    """Each bad value named where it came from: the environment variable when one is set
    (it wins), else the key of the --config file, else the field."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "settings"
        hint = ""
        if loc in Settings.model_fields:
            env = f"{ENV_PREFIX}{loc.upper()}"
            if env in os.environ:
                hint = f" (env {env})"
            elif loc in from_file and config is not None:
                hint = f" ({config}, key {loc})"
            else:
                hint = f" (env {env} or the --config key {loc})"
        parts.append(f"invalid setting {loc}{hint}: {err['msg']}")
    return "; ".join(parts)

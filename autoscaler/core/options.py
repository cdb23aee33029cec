"""Each component's part of the settings, as a frozen object built at the edge from the
one `Settings` (`Settings.prometheus_options()` and its siblings), the way the planner
gets `PlannerPolicy`: a component reads only what it is given, and a test builds a
component from its own section.

Field names are the Settings field names (documented once, there), so a section is
`Settings` cut by subsystem; environment variables and the config file stay flat. The
defaults live in `Settings` only: a section is always built from one. Also the one home
of our annotation names (`Annotations`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import SecretStr


class HeadroomPlugin(StrEnum):
    """How a queue's headroom is computed: which Volcano plugin admits its pods."""

    AUTO = "auto"
    PROPORTION = "proportion"
    CAPACITY = "capacity"
    DESERVED = "deserved"  # deprecated: deserved - allocated (wrong under both plugins)


class NodeGroupsMode(StrEnum):
    """Whether Volcano's nodegroup plugin runs, and in which mode: `strict` (its
    default) and `lenient` (`strict: false`) apply wherever some Queue names node groups
    (spec.affinity or the volcano.sh/nodegroup-resource-limits annotation); `off`: the
    plugin is not in the scheduler's conf, the rules bound nothing."""

    STRICT = "strict"
    LENIENT = "lenient"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class Annotations:
    """Our annotations on jobs, all under one prefix (the `annotation_prefix` setting)."""

    prefix: str

    @property
    def last_scale(self) -> str:
        """Written on every resize: when (our cooldown survives a restart)."""
        return f"{self.prefix}/last-scale-time"

    @property
    def last_scale_reason(self) -> str:
        """Written on every resize: why."""
        return f"{self.prefix}/last-scale-reason"

    @property
    def restart_cost(self) -> str:
        """Set by the user: what a restart of this job costs, in seconds."""
        return f"{self.prefix}/restart-cost-seconds"

    @property
    def expected_runtime(self) -> str:
        """Set by the user: seconds the job is expected to run from its start; a reclaim
        from it or for it then goes ahead only where it pays (autoscaler/plan/payoff.py)."""
        return f"{self.prefix}/expected-runtime-seconds"

    @property
    def progress(self) -> str:
        """Set by the job (its trainer, e.g. at each epoch): the fraction of its work
        done, 0 to 1 ("0.4", or "40%"); what is left is extrapolated from it."""
        return f"{self.prefix}/progress"

    @property
    def measured_restart_cost(self) -> str:
        """Written by the daemon: `<seconds>@<the resize it measured>`."""
        return f"{self.prefix}/measured-restart-cost"

    @property
    def paused(self) -> str:
        """Set by the user ("true"): leave this job alone."""
        return f"{self.prefix}/paused"

    @property
    def paddle_elastic(self) -> str:
        """Set by the user on a PaddleJob ("true"): it runs Paddle's elastic launcher,
        so resizing it is safe (docs/jobs.md, PaddleJob)."""
        return f"{self.prefix}/paddle-elastic"

    @property
    def max_replicas(self) -> str:
        """Set by the user on a Volcano Job: its max workers (it has no such field)."""
        return f"{self.prefix}/max-replicas"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadOptions:
    """How the objects are read into records (parse.py, the job kinds): which
    resources are GPUs, our annotations' names, whether pods are read for node fit."""

    gpu_resource_names: tuple[str, ...]
    annotations: Annotations
    node_fit: bool
    # a template's pods get the ExtendedResourceToleration plugin's tolerations
    extended_resource_toleration: bool = True
    # Volcano's nodegroup plugin: read the Queues' node groups (parse/assemble.py)
    node_groups: NodeGroupsMode = NodeGroupsMode.STRICT


# The defaults of the settings a reader needs, here so that a reader given no options
# (KubeSource without `decode`, a test, a tool) needs no settings loader; Settings takes
# its defaults of these fields from the same names.
DEFAULT_GPU_RESOURCE_NAMES = ("nvidia.com/gpu",)
DEFAULT_ANNOTATION_PREFIX = "elastic-autoscaler.io"
DEFAULT_NODE_FIT = True
DEFAULT_EXTENDED_RESOURCE_TOLERATION = True


def default_read_options() -> ReadOptions:
    """The read options of the default settings (`Settings().read_options()`)."""
    return ReadOptions(
        gpu_resource_names=DEFAULT_GPU_RESOURCE_NAMES,
        annotations=Annotations(DEFAULT_ANNOTATION_PREFIX),
        node_fit=DEFAULT_NODE_FIT,
        extended_resource_toleration=DEFAULT_EXTENDED_RESOURCE_TOLERATION,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """The daemon's snapshot source: how the readings are joined and trusted."""

    headroom_plugin: HeadroomPlugin
    cross_check_queue_status: bool
    kube_max_stale_seconds: float
    read: ReadOptions


@dataclass(frozen=True, slots=True, kw_only=True)
class PrometheusOptions:
    """The Prometheus source: where to ask, how, and how to read the answer."""

    prometheus_url: str
    prometheus_timeout_seconds: float
    prometheus_retries: int
    prometheus_bearer_token_file: Path | None
    prometheus_username: str | None
    prometheus_password: SecretStr | None
    prometheus_ca_file: Path | None
    prometheus_insecure_skip_verify: bool
    prometheus_max_response_bytes: int
    headroom_plugin: HeadroomPlugin
    deserved_gpus_series: str
    allocated_gpus_series: str
    request_gpus_series: str
    inqueue_gpus_series: str
    real_capacity_gpus_series: str
    free_gpus_query: str | None
    queue_label: str
    metric_unit_divisor: float
    max_metric_age_seconds: float
    clock_skew_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeOptions:
    """The Kubernetes client and its watch caches: which cluster, what is watched."""

    kubeconfig: Path | None
    kube_context: str
    namespaces: tuple[str, ...]
    job_kinds: tuple[str, ...]
    label_selector: str
    node_fit: bool  # nodes and bound pods are watched only for it
    kube_request_timeout_seconds: float
    watch_timeout_seconds: int
    watch_stall_seconds: float
    kube_list_page_size: int
    kube_protobuf: bool
    max_object_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ActuatorOptions:
    """The live actuator: how it writes, and the annotations it writes."""

    identity: str
    max_parallel_writes: int
    refusal_retry_seconds: float
    cycle_deadline_seconds: float
    kube_request_timeout_seconds: float
    annotations: Annotations


def check_lease_timing(duration_seconds: float, renew_deadline_seconds: float) -> None:
    """A leader must give up before its Lease expires, or two replicas lead at once."""
    if renew_deadline_seconds >= duration_seconds:
        raise ValueError("lease_renew_deadline_seconds must be below lease_duration_seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderOptions:
    """Leader election. `leader_election` is whether to elect at all: off for a dry run,
    which writes nothing, the Lease included (it must never displace a live leader)."""

    leader_election: bool
    lease_name: str
    lease_namespace: str
    lease_duration_seconds: float
    lease_renew_deadline_seconds: float
    lease_retry_period_seconds: float
    identity: str
    kube_request_timeout_seconds: float

    def __post_init__(self) -> None:
        check_lease_timing(self.lease_duration_seconds, self.lease_renew_deadline_seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopOptions:
    """The loop: cycle timing, and what each cycle's status says (the planner's policy
    is its own section: `PlannerPolicy`)."""

    interval_seconds: float
    min_interval_seconds: float
    cycle_deadline_seconds: float
    ready_max_age_seconds: float
    dry_run: bool
    status_max_jobs: int
    status_heartbeat_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusOptions:
    """The status object's writer (and readers): which ConfigMap, how often."""

    status_configmap: str
    lease_namespace: str  # the ConfigMap lives beside the Lease, in our namespace
    status_heartbeat_seconds: float
    dry_run: bool
    kube_request_timeout_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """/metrics, /healthz, /readyz."""

    listen_host: str
    listen_port: int

"""The settings' fields, one group a section (planner, Prometheus, Kubernetes, the
loop, leader election, the status object, HTTP and logs): each field's YAML key,
`AUTOSCALER_*` variable, default, validation and the description the docs and the chart
are generated from. `autoscaler/settings.py` composes them into the one Settings object;
they live apart so that what a setting is can be read without how settings are loaded.

A new setting: add its field to its section's group, then run
`python deploy/chart/sync_settings.py` and `python tests/tools/settings_table.py`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from autoscaler.client.redact import without_password
from autoscaler.core.options import (
    DEFAULT_ANNOTATION_PREFIX,
    DEFAULT_EXTENDED_RESOURCE_TOLERATION,
    DEFAULT_GPU_RESOURCE_NAMES,
    DEFAULT_NODE_FIT,
    HeadroomPlugin,
    NodeGroupsMode,
    check_lease_timing,
)
from autoscaler.core.policy import GrowthPolicy, VictimOrder
from autoscaler.core.resources import JOB_RESOURCES

ENV_PREFIX = "AUTOSCALER_"

GPU_LABEL = '{resource="nvidia.com/gpu"}'
DEFAULT_DESERVED_GPUS_SERIES = "volcano_queue_deserved_scalar_resources" + GPU_LABEL
DEFAULT_ALLOCATED_GPUS_SERIES = "volcano_queue_allocated_scalar_resources" + GPU_LABEL
DEFAULT_REQUEST_GPUS_SERIES = "volcano_queue_request_scalar_resources" + GPU_LABEL
DEFAULT_INQUEUE_GPUS_SERIES = "volcano_queue_inqueue_scalar_resources" + GPU_LABEL
DEFAULT_REAL_CAPACITY_GPUS_SERIES = "volcano_queue_real_capacity_scalar_resources" + GPU_LABEL
DEFAULT_SERIES = {
    "deserved_gpus_series": DEFAULT_DESERVED_GPUS_SERIES,
    "allocated_gpus_series": DEFAULT_ALLOCATED_GPUS_SERIES,
    "request_gpus_series": DEFAULT_REQUEST_GPUS_SERIES,
    "inqueue_gpus_series": DEFAULT_INQUEUE_GPUS_SERIES,
    "real_capacity_gpus_series": DEFAULT_REAL_CAPACITY_GPUS_SERIES,
}


class LogFormat(StrEnum):
    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


class _PlannerFields(BaseModel):
    """The planner's settings (`Settings.planner_policy()`), then what the read side takes
    from them: which resources are GPUs, our annotations' prefix."""

    # ---- planner policy -------------------------------------------------------------
    cooldown_seconds: float = Field(
        300,
        ge=0,
        description="A job resized less than this ago is not grown again "
        "(every resize restarts its torchrun worker group from the last checkpoint).",
    )
    cooldown_restart_cost_factor: float = Field(
        10.0,
        ge=0,
        description="A job whose restart costs more cools down longer: its cooldown is "
        "max(cooldown_seconds, this x its restart cost). 0 turns it off. 10 measured "
        "-5 % average JCT and -12 % restarts with per-model restart costs "
        "(docs/benchmarks.md).",
    )
    reclaim_cooldown_seconds: float = Field(
        60,
        ge=0,
        description="A job resized less than this ago is not shrunk for a "
        "waiting gang. Shorter than cooldown_seconds: pending jobs matter more.",
    )
    reclaim_payoff_factor: float = Field(
        1.0,
        ge=0,
        description="Where jobs declare their run (annotations expected-runtime-seconds "
        "or progress), workers are reclaimed for a waiting gang only when what the "
        "reclaim buys the queue's waiting gangs (how much sooner they start in all, the "
        "gang and those behind it, walked over the declared runs with the victims ending "
        "later) exceeds this many times what its victims lose (their restart and the "
        "work of the workers taken, while the gang runs). Jobs that declare nothing are "
        "reclaimed from as before, but for swaps (every victim gives up as many running "
        "workers as it keeps): where the queue's finished jobs (start and completion) "
        "show each victim to have no more than this many times a newcomer's expected "
        "run plus two restarts left, the swap is refused; before the queue has 30 "
        "finished runs, so is every such swap in a queue where 30 jobs or more run. "
        "A gang behind gangs refused "
        "this way is weighed with them (Volcano admits them first): one reclaim "
        "for all of them, or none. 0 turns the check off.",
    )
    max_gang_wait_seconds: float = Field(
        1800,
        ge=0,
        description="A waiting gang older than this stops the skipping: "
        "nothing in its queue grows until it fits (later gangs are still served by "
        "reclaim unless starving_gang_blocks_later_gangs is true).",
    )
    starving_gang_blocks_later_gangs: bool = Field(
        False,
        description="A starving gang (see max_gang_wait_seconds) also stops the "
        "gangs behind it from being served by reclaim. false (the default): it only stops "
        "growth; Volcano backfills smaller gangs anyway, and the simulator measured 3-5 % "
        "lower average JCT (docs/benchmarks.md). true: the old rule.",
    )
    unplaced_timeout_seconds: float = Field(
        300,
        ge=0,
        description="Workers we asked for that are still not running this long "
        "after our resize are cut back to what runs (never below min).",
    )
    no_pods_timeout_seconds: float = Field(
        300,
        ge=0,
        description="Workers a job asks for (any job: ours, one we leave alone, a rigid "
        "one) that still have no pod at all this long after the job's spec was last "
        "written (its creation, our last resize, or any other write its managedFields "
        "date) stop counting as GPUs in flight: HoldNoPods, usually a job whose operator "
        "is not running or refuses it. Needs the pod watch (node_fit); unbound pods "
        "still count.",
    )
    growth_policy: GrowthPolicy = Field(
        GrowthPolicy.FILL,
        description="fill: grow as few jobs as possible, smallest "
        "first, each to its max in one step. fair: max-min fair share in workers.",
    )
    min_step_workers: int = Field(
        1,
        ge=1,
        description="Skip a change smaller than this many workers unless it "
        "reaches the job's min or max (hysteresis).",
    )
    reserve_gpus_per_queue: int = Field(
        0, ge=0, description="GPUs per queue that growth leaves idle for jobs yet to come."
    )
    growth_payoff_factor: float = Field(
        0.0,
        ge=0,
        description="Grow a job only when the time the extra workers save "
        "exceeds this many times the restart they cost. The job's running time so far "
        "estimates what is left. 0 turns the rule off.",
    )
    restart_cost_seconds: float = Field(
        30,
        ge=0,
        description="What one resize (a torchrun restart from checkpoint) costs a job "
        "when neither its annotation <prefix>/restart-cost-seconds nor a measurement says; "
        "used by cooldown_restart_cost_factor, growth_payoff_factor and "
        "victim_order=least-work-lost.",
    )
    reclaim_from_higher_priority: bool = Field(
        True,
        description="A waiting gang may take extra (above-min) workers from elastic "
        "jobs of any priority, lowest priority first: extra workers never keep another job "
        "from its minimum. false: only from jobs of priority <= the gang's (the old rule).",
    )
    victim_order: VictimOrder = Field(
        VictimOrder.MOST_WORKERS,
        description="Which elastic jobs lose workers first for a "
        "waiting gang, after lowest priority: most-workers (the job with the most "
        "reclaimable workers, so few jobs restart) or least-work-lost.",
    )
    clock_skew_seconds: float = Field(
        120,
        ge=0,
        description="A last-scale-time annotation this far in the future is "
        "reported and the job held, rather than trusted.",
    )
    grow_without_min_available: bool = Field(
        False,
        description="Grow training-operator jobs (PyTorchJob, PaddleJob) that do not set "
        "runPolicy.schedulingPolicy.minAvailable. Off: they are only shrunk "
        "(HoldNoMinAvailable), because training-operator then sizes their PodGroup's "
        "minMember to all replicas: growing raises the gang, and a gang the queue cannot "
        "admit at once turns the PodGroup Pending, while which training-operator creates "
        "and deletes no pods (the job stalls). Only for clusters whose scheduler does not "
        "enforce PodGroups (training-operator without gang scheduling); there it costs "
        "nothing, with Volcano it risks the stall.",
    )
    gpu_resource_names: list[str] = Field(
        default_factory=lambda: list(DEFAULT_GPU_RESOURCE_NAMES),
        min_length=1,
        description="Extended resource names counted as GPUs in pod templates, PodGroup "
        "minResources and node allocatable, and the resource label the `*_gpus_series` "
        "selectors match while they are left at their defaults (a vendor name alone, e.g. "
        "baidu.com/a800_80g_cgpu, is all it takes).",
    )
    annotation_prefix: str = Field(
        DEFAULT_ANNOTATION_PREFIX,
        min_length=1,
        description="Prefix of our annotations: "
        '<prefix>/last-scale-time (written on every resize), <prefix>/paused: "true" '
        "(opt a job out).",
    )

    @field_validator("gpu_resource_names")
    @classmethod
    def _resource_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or "/" not in name:
                raise ValueError(f"{name!r} is not an extended resource name like nvidia.com/gpu")
        return value


class _PrometheusFields(BaseModel):
    """Where and how Prometheus is asked, and what of its answer is trusted
    (`Settings.prometheus_options()`, `Settings.source_options()`)."""

    # ---- Prometheus -----------------------------------------------------------------
    prometheus_url: str = Field(
        "http://prometheus-operated.monitoring.svc:9090",
        description="Base URL of the Prometheus that scrapes Volcano's scheduler metrics "
        "(an http or https URL with a host, checked at start; the --prometheus-url flag "
        "wins).",
    )
    headroom_plugin: HeadroomPlugin = Field(
        HeadroomPlugin.AUTO,
        description="Which Volcano plugin decides what a queue's pods may be bound to, and "
        "so how its headroom is computed: `proportion` (the share the queue would get if it "
        "asked for more, water-filled by weight, minus allocated), `capacity` (real "
        "capacity minus allocated minus inqueue); both bounded by the GPUs idle on "
        "schedulable nodes and by whole workers per node. `auto`: capacity when the "
        "scheduler exports real-capacity series, else proportion (logged when it is found "
        "or changes). `deserved` (deprecated): deserved - allocated, which reads 0 under "
        "both plugins whenever every pod runs.",
    )
    deserved_gpus_series: str = Field(
        DEFAULT_DESERVED_GPUS_SERIES,
        min_length=1,
        description="Series selector of each queue's deserved GPUs (Volcano's scheduler "
        "metric): shown in the plan; used only by headroom_plugin=deserved.",
    )
    allocated_gpus_series: str = Field(
        DEFAULT_ALLOCATED_GPUS_SERIES,
        min_length=1,
        description="Series selector of each queue's allocated GPUs (bound pods). Read raw, "
        "with its scrape time; negative, NaN/Inf, absurd or stale values hold the queue.",
    )
    request_gpus_series: str = Field(
        DEFAULT_REQUEST_GPUS_SERIES,
        min_length=1,
        description="Series selector of each queue's requested GPUs (its existing pods, "
        "bound or not): the proportion plugin caps every other queue's share at it.",
    )
    inqueue_gpus_series: str = Field(
        DEFAULT_INQUEUE_GPUS_SERIES,
        min_length=1,
        description="Series selector of each queue's GPUs held for admitted (Inqueue) gangs "
        "not yet allocated: the capacity plugin's headroom leaves them out.",
    )
    real_capacity_gpus_series: str = Field(
        DEFAULT_REAL_CAPACITY_GPUS_SERIES,
        min_length=1,
        description="Series selector of each queue's real capacity (exported by the "
        "capacity plugin only; its presence is how headroom_plugin=auto finds that plugin).",
    )
    node_fit: bool = Field(
        DEFAULT_NODE_FIT,
        description="Grant a worker only where one node admits it as the scheduler's "
        "filters would: every resource it requests free there (GPUs, CPU, memory, other "
        "extended resources), its nodeSelector and required node affinity matched, every "
        "NoSchedule/NoExecute taint tolerated, the node Ready and not cordoned, its host "
        "ports free. Needs list/watch on nodes and pods (cluster-wide: another namespace's "
        "pods use the same nodes). Off: the plugin's room alone, and no pod watch.",
    )
    node_groups: NodeGroupsMode = Field(
        NodeGroupsMode.STRICT,
        description="Volcano's nodegroup plugin, as the scheduler's conf runs it: where "
        "some Queue names node groups (spec.affinity, or the annotation "
        "volcano.sh/nodegroup-resource-limits), a worker is granted only on nodes of the "
        "groups its queue may use (label volcano.sh/nodegroup-name) and within the "
        "queue's per-group limits. `strict` (the plugin's default): a queue naming no "
        "group fits no node; `lenient` (the plugin's `strict: false`): such a queue fits "
        "unlabelled nodes; `off`: the plugin does not run, node groups bound nothing.",
    )
    capacity_ancestor_reclaim_level: int = Field(
        0,
        ge=0,
        description="The capacity plugin's `ancestorReclaimLevel` argument, as the "
        "scheduler's conf sets it (Volcano's default 0), read under a queue tree "
        "(enableHierarchy): a waiting gang takes workers back from a queue in another "
        "branch of the tree only where that queue's ancestors up to this many levels "
        "above it (those the gang's queue does not share) hold more than their deserved, "
        "as the scheduler's reclaim picks its victims. 0: any queue over its own deserved "
        "may give back.",
    )
    extended_resource_toleration: bool = Field(
        DEFAULT_EXTENDED_RESOURCE_TOLERATION,
        description="Read a worker template as the API server's ExtendedResourceToleration "
        "admission plugin (on in GKE, EKS and AKS) will create its pod: with a toleration "
        "`<resource>:Exists:NoSchedule` for every extended resource it requests, so GPU "
        "nodes tainted `nvidia.com/gpu=present:NoSchedule` admit it. Turn off where the "
        "plugin is not enabled.",
    )
    free_gpus_query: str | None = Field(
        None,
        min_length=1,
        description="Instead of the series: one instant PromQL returning free GPUs by "
        "queue label (e.g. a recording rule), taken as the headroom as given (still bounded "
        "by the nodes). Its values get the same checks, but its age is only the answer's, "
        "not the scrape's.",
    )
    queue_label: str = Field("queue_name", min_length=1, description="Label naming the queue.")
    metric_unit_divisor: float = Field(
        1000,
        gt=0,
        description="The query's unit per GPU (Volcano scalar metrics are milli-units: 1000).",
    )
    max_metric_age_seconds: float = Field(
        120,
        gt=0,
        description="A queue whose allocated, request or deserved series was last scraped "
        "longer ago than this holds (HoldMetricsStale); keep it above 2-3 scrape intervals.",
    )
    prometheus_timeout_seconds: float = Field(10, gt=0, description="Deadline of one query.")
    prometheus_retries: int = Field(
        2,
        ge=0,
        description="Our retries of a failed query within a cycle, with backoff "
        "(the client's own retries are off).",
    )
    prometheus_bearer_token_file: Path | None = Field(
        None, description="File holding a bearer token for Prometheus (re-read every query)."
    )
    prometheus_username: str | None = Field(None, description="Basic-auth user.")
    prometheus_password: SecretStr | None = Field(None, description="Basic-auth password.")
    prometheus_ca_file: Path | None = Field(None, description="CA bundle to verify Prometheus TLS.")
    prometheus_insecure_skip_verify: bool = Field(
        False, description="Skip TLS verification of Prometheus (never in production)."
    )
    prometheus_max_response_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="A Prometheus answer larger than this is not "
        "read: the cycle holds (a broken or hostile endpoint cannot exhaust our memory).",
    )
    cross_check_queue_status: bool = Field(
        False,
        description="Hold a queue whose Prometheus answer disagrees with "
        "Queue.status.allocated from the API by more than one GPU (the allocated metric "
        "against it; a free-GPU reading taken as given against spec.deserved minus it). "
        "Off by default: status.allocated is written by Volcano's controller and lags "
        "the scheduler by a sync.",
    )

    @field_validator("prometheus_url")
    @classmethod
    def _prometheus_url(cls, value: str) -> str:
        shown = without_password(value)
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise ValueError(f"{shown!r} is not a URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{shown!r} is not an http(s) URL like http://prometheus.monitoring.svc:9090"
            )
        return value


class _KubeFields(BaseModel):
    """The Kubernetes client, its watch caches and its writes (`Settings.kube_options()`,
    `Settings.actuator_options()`)."""

    # ---- Kubernetes -----------------------------------------------------------------
    kubeconfig: Path | None = Field(
        None,
        description="Kubeconfig file (the --kubeconfig flag wins). Unset: $KUBECONFIG, "
        "else the in-cluster config, else ~/.kube/config.",
    )
    kube_context: str = Field(
        "",
        description="Kubeconfig context to use (the --context flag); empty: the "
        "kubeconfig's current context.",
    )
    namespaces: list[str] = Field(
        default_factory=list,
        description="Namespaces whose jobs and PodGroups we watch; empty: all namespaces.",
    )
    job_kinds: list[str] = Field(
        default_factory=list,
        description="Job kinds to manage: PyTorchJob, PaddleJob (both kubeflow.org) and "
        "Job (batch.volcano.sh, a Volcano Job). Empty: every one of them whose CRD is "
        "installed (a missing CRD is one info line, and is checked again every 5 s).",
    )
    label_selector: str = Field("", description="Label selector for the jobs we manage.")
    kube_request_timeout_seconds: float = Field(
        10, gt=0, description="Deadline of one API request (watches excepted)."
    )
    watch_timeout_seconds: int = Field(
        300, ge=1, description="Server-side timeout of one watch request before it is renewed."
    )
    watch_stall_seconds: float = Field(
        90,
        gt=0,
        description="A watch that delivers nothing (no event, no bookmark; the API "
        "server's watch cache sends a bookmark about every minute) for longer than this "
        "is restarted, and until it is connected again its cache may be stale: every "
        "write holds (HoldCacheStale) and /readyz fails. Also bounds the wait for a "
        "watch's first answer.",
    )
    max_parallel_writes: int = Field(
        8,
        ge=1,
        le=64,
        description="The most job patches in flight at once; Events go beside them, as "
        "many again, while the API server neither throttles nor fails, else they share "
        "these slots behind the patches. The number really in flight adapts to the API "
        "server: it halves on a 429 (or 503 with Retry-After) and grows back as writes "
        "land; a throttled write is sent again after its Retry-After, and what does not "
        "fit in the cycle goes in an early next cycle.",
    )
    refusal_retry_seconds: float = Field(
        600,
        gt=0,
        description="A job whose resize the cluster refused (an admission policy or "
        "webhook, validation, RBAC: 403/422) holds (HoldRefused) and its share goes to the "
        "rest of its queue, until the job changes or this long has passed; then it is "
        "asked once more.",
    )
    kube_list_page_size: int = Field(
        500,
        ge=1,
        le=5000,
        description="Objects per page of a LIST (initial sync and "
        "re-lists after 410): larger pages mean fewer round trips, smaller ones less memory "
        "per page. 500 is what client-go's reflectors and kubectl ask; at 10k jobs, 50k "
        "pods and 26k nodes a sync in pages of 100 took 7.1 s against 4.1 s in pages of "
        "500, for the same peak memory (docs/benchmarks.md). Default 100 before.",
    )
    kube_protobuf: bool = Field(
        True,
        description="LIST Pods and Nodes in protobuf (initial sync and re-lists), as "
        "client-go's informers ask for built-in kinds: the API server spends about half the "
        "CPU on those LISTs it spends encoding JSON. Off: JSON, for a proxy in front of the "
        "API server that does not pass protobuf. Watches and custom resources are JSON "
        "either way; a server that answers in JSON is read as JSON. `max_object_bytes` "
        "counts the bytes as served: a Pod or Node LISTed in protobuf is about a quarter "
        "smaller than in JSON.",
    )
    kube_max_stale_seconds: float = Field(
        120,
        gt=0,
        description="Hold every queue when a Kubernetes cache has failed to "
        "list or watch for longer than this: its picture of jobs and gangs may be stale.",
    )
    max_object_bytes: int = Field(
        1_048_576, ge=1024, description="Objects larger than this are reported and ignored."
    )

    @field_validator("job_kinds")
    @classmethod
    def _job_kinds(cls, value: list[str]) -> list[str]:
        known = [r.kind for r in JOB_RESOURCES]
        for name in value:
            if name not in known:
                raise ValueError(f"{name!r} is not a job kind we manage ({', '.join(known)})")
        return value


class _LoopFields(BaseModel):
    """When cycles run (`Settings.loop_options()`)."""

    # ---- loop -----------------------------------------------------------------------
    interval_seconds: float = Field(
        120,
        gt=0,
        description="Time between planning cycles. Batching resizes into fewer "
        "cycles cuts restarts.",
    )
    min_interval_seconds: float = Field(
        15,
        ge=0,
        description="A PodGroup turning waiting (added, or changed into Pending or "
        "Inqueue) or a job finishing or deleted triggers an early cycle, at most once per "
        "this many seconds.",
    )
    cycle_deadline_seconds: float = Field(60, gt=0, description="Deadline of one whole cycle.")
    dry_run: bool = Field(False, description="Plan and log, never write (same as --dry-run).")


class _LeaderFields(BaseModel):
    """Leader election through a Lease (`Settings.leader_options()`)."""

    # ---- leader election ------------------------------------------------------------
    leader_election: bool = Field(
        True, description="Only the holder of the Lease patches jobs (needed with >1 replica)."
    )
    lease_name: str = Field("elastic-autoscaler", min_length=1, description="Lease name.")
    lease_namespace: str = Field(
        "elastic-autoscaler",
        min_length=1,
        description="Namespace of the Lease and the status object (ours; the "
        "--autoscaler-namespace flag wins).",
    )
    lease_duration_seconds: float = Field(15, gt=0, description="Lease duration.")
    lease_renew_deadline_seconds: float = Field(10, gt=0, description="Leader renew deadline.")
    lease_retry_period_seconds: float = Field(2, gt=0, description="Lease retry period.")
    identity: str = Field("", description="Our identity in the Lease; empty: the pod's hostname.")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        check_lease_timing(self.lease_duration_seconds, self.lease_renew_deadline_seconds)
        return self


class _StatusFields(BaseModel):
    """The status object the leader writes (`Settings.status_options()`)."""

    # ---- status object ----------------------------------------------------------------
    status_configmap: str = Field(
        "elastic-autoscaler-status",
        max_length=253,
        description="ConfigMap in lease_namespace (ours) where the leader writes what the "
        "last cycle decided and why (per queue the headroom and what bounded it, waiting "
        "gangs, jobs not settled); `elastic-autoscaler status` and `explain` read it. "
        "Empty: not written.",
    )
    status_heartbeat_seconds: float = Field(
        600,
        gt=0,
        description="The status object is written when its content changes, else at "
        "most this often (a heartbeat), so a steady cluster costs one write per heartbeat.",
    )
    status_max_jobs: int = Field(
        500,
        ge=0,
        le=5000,
        description="Jobs listed one by one in the status object, most urgent first "
        "(refused, resizing, invalid, held); the rest are counted by queue and reason. "
        "Keeps the object far below the 1 MiB ConfigMap limit at 10k+ jobs.",
    )


class _ServerFields(BaseModel):
    """The HTTP endpoints and the logs (`Settings.server_options()`)."""

    # ---- HTTP, logs -----------------------------------------------------------------
    listen_host: str = Field("0.0.0.0", description="Address of /metrics /healthz /readyz.")
    listen_port: int = Field(8080, ge=0, le=65535, description="Port of the HTTP endpoints.")
    ready_max_age_seconds: float = Field(
        0,
        ge=0,
        description="/readyz fails when the last good cycle is older than this; "
        "0: three intervals.",
    )
    log_level: str = Field("info", description="debug, info, warning or error.")
    log_format: LogFormat = Field(
        LogFormat.AUTO,
        description="json, console (text), or auto: JSON when stderr is not a terminal, "
        "else console. Every line of the daemon's stream is in it (a library's, a dry "
        "run's `would scale`).",
    )

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be one of debug, info, warning, error")
        return value.lower()


# pydantic takes the fields of the last base first: the sections are listed last to first,
# so that the fields keep the order docs/settings.md and the chart show (planner first)

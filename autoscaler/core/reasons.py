"""Why the planner did, or did not, change something: one enum for every output
(plan tables, logs, Kubernetes Events, metric labels, the status object). The rule
each reason comes from is named in docs/reasons.md."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why the planner did, or did not, change something. One enum for every output:
    dry-run tables, logs, Kubernetes Events and metric labels all use these values."""

    # actions on a job
    SCALE_UP_IDLE_GPUS = "ScaleUpIdleGpus"
    RECLAIM_FOR_PENDING = "ReclaimForPending"
    RECLAIM_FOR_QUEUE = "ReclaimForQueue"  # gives back another queue's share to its gang
    TRIM_UNPLACED = "TrimUnplaced"

    # holds on a managed job
    AT_MAX = "HoldAtMax"
    NO_IDLE_GPUS = "HoldNoIdleGpus"
    COOLDOWN = "HoldCooldown"
    MIN_STEP = "HoldMinStep"
    IN_FLIGHT = "HoldInFlight"
    NO_PODS = "HoldNoPods"  # workers asked for long ago have no pod at all
    RELEASING = "HoldReleasing"
    OWN_GANG_WAITING = "HoldOwnGangWaiting"
    NO_MIN_AVAILABLE = "HoldNoMinAvailable"
    GANG_STARVING = "HoldGangStarving"
    GANG_WAITING = "HoldGangWaiting"  # a gang waits for GPUs to free: reclaim does not pay
    NOT_WORTH_RESTART = "HoldNotWorthRestart"
    METRICS_MISSING = "HoldMetricsMissing"
    METRICS_INVALID = "HoldMetricsInvalid"
    METRICS_STALE = "HoldMetricsStale"
    CACHE_STALE = "HoldCacheStale"  # a watch went silent: the objects may be stale
    METRICS_UNAVAILABLE = "HoldMetricsUnavailable"
    QUEUE_CLOSED = "HoldQueueClosed"
    QUEUE_MISSING = "HoldQueueMissing"  # the job's Queue object does not exist
    QUEUE_CAPACITY = "HoldQueueCapacity"
    # a parent in the capacity plugin's queue tree: jobs run only in its leaves, its
    # room is theirs (docs/reasons.md)
    QUEUE_PARENT = "HoldQueueParent"
    NO_NODE_FITS = "HoldNoNodeFits"
    CLOCK_SKEW = "HoldClockSkew"
    WRITE_REFUSED = "HoldRefused"  # the cluster refused its last resize (admission, 4xx)

    # jobs we do not manage, each with its own reason
    INVALID_POLICY = "InvalidPolicy"
    INVALID_SPEC = "InvalidSpec"
    INVALID_REPLICAS = "InvalidReplicas"
    INVALID_ANNOTATION = "InvalidAnnotation"
    NOT_ELASTIC = "NotElastic"
    OPERATOR_HPA = "SkipOperatorHpa"
    PAUSED = "SkipPaused"
    FINISHED = "SkipFinished"
    SUSPENDED = "SkipSuspended"
    TERMINATING = "SkipTerminating"
    DUPLICATE = "SkipDuplicate"
    # Kueue admits the job by its replica counts: a resize would make Kueue suspend it
    # (every pod deleted) and queue it again (docs/reasons.md)
    KUEUE_MANAGED = "SkipKueueManaged"

    # waiting gangs (pending PodGroups)
    GANG_FITS = "GangFits"
    GANG_COVERED = "GangCoveredByReclaim"
    GANG_UNCOVERABLE = "GangUncoverable"
    GANG_RECLAIM_UNPAID = "GangReclaimDoesNotPay"
    GANG_BLOCKED = "GangBlockedByStarvingGang"
    GANG_OWNER_GONE = "GangOwnerGone"  # its job is being deleted, gone, or not watched
    INVALID_GANG = "InvalidPodGroup"

    @property
    def unmanaged(self) -> bool:
        """The job is left alone whatever the queue looks like."""
        return self in _UNMANAGED


_UNMANAGED = frozenset(
    {
        Reason.INVALID_POLICY,
        Reason.INVALID_SPEC,
        Reason.INVALID_REPLICAS,
        Reason.INVALID_ANNOTATION,
        Reason.NOT_ELASTIC,
        Reason.OPERATOR_HPA,
        Reason.PAUSED,
        Reason.FINISHED,
        Reason.SUSPENDED,
        Reason.TERMINATING,
        Reason.DUPLICATE,
        Reason.KUEUE_MANAGED,
    }
)

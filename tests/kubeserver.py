"""A real Kubernetes API server for the tests: etcd + kube-apiserver in envtest's layout.

`KUBEBUILDER_ASSETS` names the folder holding the `etcd` and `kube-apiserver` binaries (the
controller-runtime envtest convention). `EnvTest` starts both on free 127.0.0.1 ports with
certificates it makes, applies the real CRDs (Kubeflow and Volcano, `tests/crds/`) and
gives the admin credentials as a kubeconfig and as a kubernetes_asyncio `Configuration`, so
code under test talks to it exactly as in production. It can stop and start the API server
alone on the same etcd (an API server restart under a running daemon) and mint tokens.

There is no scheduler, kubelet or controller-manager: pods never run, namespaces are not
finalised, nothing is garbage-collected. Job status is written through `/status`, as the
operator would.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import Configuration
from ports import free_port

CRDS = Path(__file__).parent / "crds"
ASSETS_ENV = "KUBEBUILDER_ASSETS"
READY_SECONDS = 60.0


def assets_problem() -> str | None:
    """Why the real API server cannot run here (a skip reason), or None."""
    assets = os.environ.get(ASSETS_ENV)
    if not assets:
        return f"{ASSETS_ENV} is not set (point it at a folder with etcd and kube-apiserver)"
    for binary in ("etcd", "kube-apiserver"):
        path = Path(assets) / binary
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"{ASSETS_ENV}={assets} has no executable {binary}"
    return None


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass
class EnvTest:
    """One etcd and one kube-apiserver, started by `start()`, stopped by `stop()`."""

    assets: Path
    root: Path
    crds: Path = CRDS
    api_port: int = 0
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    # more kube-apiserver flags, e.g. ["--max-mutating-requests-inflight=1"]; a flag given
    # here wins over the same flag below (the server takes the last one)
    extra_args: list[str] = field(default_factory=list)
    _etcd: subprocess.Popen[bytes] | None = None
    _api: subprocess.Popen[bytes] | None = None
    _ssl: ssl.SSLContext | None = None
    starts: int = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._make_pki()
        etcd_client, etcd_peer, self.api_port = free_port(), free_port(), free_port()
        self._etcd_url = f"http://127.0.0.1:{etcd_client}"
        data = self.root / "etcd-data"
        data.mkdir(mode=0o700, exist_ok=True)
        self._etcd = self._spawn(
            "etcd",
            [
                "--data-dir",
                str(data),
                "--client-url",
                self._etcd_url,
                "--peer-url",
                f"http://127.0.0.1:{etcd_peer}",
            ],
        )
        self.start_apiserver()
        self.apply_crds()

    def start_apiserver(self) -> None:
        """(Re)start the API server on the same port and etcd; wait until /readyz is ok."""
        assert self._api is None or self._api.poll() is not None, "API server already running"
        pki = self.root / "pki"
        env = {**os.environ, "POD_NAMESPACE": "kube-system", "POD_NAME": "kube-apiserver-test"}
        self._api = self._spawn(
            "kube-apiserver",
            [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--etcd-servers={self._etcd_url}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'server.crt'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
                *self.extra_args,
            ],
            env=env,
            log_name=f"kube-apiserver.{self.starts}.log",
        )
        self.starts += 1
        self._wait_ready()

    def stop_apiserver(self, *, kill: bool = False) -> None:
        """Stop the API server (SIGTERM, or SIGKILL for a crash); etcd keeps the data."""
        _stop(self._api, kill=kill)

    def stop(self) -> None:
        _stop(self._api)
        _stop(self._etcd)

    def __enter__(self) -> EnvTest:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- access ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.root / "pki" / "ca.crt"

    def configuration(self, token: str | None = None) -> Configuration:
        """A kubernetes_asyncio Configuration for the admin (or for `token`)."""
        conf = Configuration()
        conf.host = self.url
        conf.ssl_ca_cert = str(self.ca_file)
        conf.api_key = {"BearerToken": token or self.token}
        conf.api_key_prefix = {"BearerToken": "Bearer"}
        return conf

    def kubeconfig(self, token: str | None = None, name: str = "admin") -> Path:
        """A kubeconfig file for the admin (or for `token`), as a user would have one."""
        path = self.root / f"kubeconfig-{name}"
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "envtest",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": name, "user": {"token": token or self.token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": name}}],
        }
        path.write_text(json.dumps(doc))
        path.chmod(0o600)
        return path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        token: str | None = None,
    ) -> Any:
        """A synchronous admin request (test set-up and checks): the decoded JSON answer.

        Raises ApiError for any status >= 400."""
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else None

    def apply(self, obj: dict[str, Any], *, manager: str = "test") -> dict[str, Any]:
        """Server-side apply of one object as the admin (creates or updates it)."""
        result: dict[str, Any] = self.request(
            "PATCH",
            f"{object_path(obj)}?fieldManager={manager}&force=true",
            obj,
            content_type="application/apply-patch+yaml",
        )
        return result

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", collection_path(obj), obj)
        return result

    def get(self, obj: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", object_path(obj))
        return result

    def delete(self, obj: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self.request("DELETE", object_path(obj))

    def patch_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch `status` through the status subresource, as the operator would."""
        result: dict[str, Any] = self.request(
            "PATCH",
            object_path(obj) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
        return result

    def apply_queue(self, name: str, **spec: Any) -> dict[str, Any]:
        """A Volcano Queue (cluster-scoped), weight 1 unless `spec` says otherwise."""
        return self.apply(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"weight": 1, **spec},
            }
        )

    def create_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{secrets.token_hex(4)}"
        self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def mint_token(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A token for a ServiceAccount (TokenRequest), as a pod's projected volume has."""
        answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return str(answer["status"]["token"])

    def log_tail(self, lines: int = 40) -> str:
        path = self.root / f"kube-apiserver.{max(self.starts - 1, 0)}.log"
        with contextlib.suppress(OSError):
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # -- internals ------------------------------------------------------------------------

    def apply_crds(self) -> None:
        names = []
        for path in sorted(self.crds.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    self.apply(doc)
                    names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + READY_SECONDS
        for name in names:
            while not _established(
                self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not Established")
                time.sleep(0.05)
        # A CRD is Established before its REST endpoint is served: wait for discovery.
        for group_version in {_group_version(self, n) for n in names}:
            while True:
                try:
                    self.request("GET", f"/apis/{group_version}")
                    break
                except ApiError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    def _spawn(
        self,
        binary: str,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        log_name: str | None = None,
    ) -> subprocess.Popen[bytes]:
        log = (self.root / (log_name or f"{binary}.log")).open("wb")
        try:
            return subprocess.Popen(
                [str(self.assets / binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            assert self._api is not None
            if self._api.poll() is not None:
                raise RuntimeError(
                    f"kube-apiserver exited with {self._api.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, ApiError, ValueError):
                req = urllib.request.Request(self.url + "/readyz")
                req.add_header("Authorization", f"Bearer {self.token}")
                with urllib.request.urlopen(req, context=self._context(), timeout=2) as resp:
                    if resp.read() == b"ok":
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(f"kube-apiserver not ready:\n{self.log_tail()}")
            time.sleep(0.1)

    def _make_pki(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from promserver import make_tls_files  # the test CA helper, one copy

        pki = self.root / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        make_tls_files(pki)  # ca.crt, server.crt, server.key (IP 127.0.0.1)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        (pki / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        (self.root / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")

    def service_account_token(self, namespace: str, name: str, cluster_role: str) -> str:
        """A ServiceAccount bound to `cluster_role` and a token for it: a client that is
        not in system:masters (which the server's max-inflight limit never throttles)."""
        with contextlib.suppress(ApiError):
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                }
            )
        self.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{namespace}-{name}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": cluster_role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            }
        )
        return self.mint_token(namespace, name)


def _established(crd: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )


def _group_version(server: EnvTest, crd_name: str) -> str:
    crd = server.request(
        "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}"
    )
    versions = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
    return f"{crd['spec']['group']}/{versions[0]}"


def _stop(process: subprocess.Popen[bytes] | None, *, kill: bool = False) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


# -- paths of objects, from their apiVersion/kind -------------------------------------------

_PLURALS = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "Secret": ("secrets", True),
    "ConfigMap": ("configmaps", True),
    "Pod": ("pods", True),
    "Event": ("events", True),
    "Node": ("nodes", False),
    "Service": ("services", True),
    "Deployment": ("deployments", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Lease": ("leases", True),
    "HorizontalPodAutoscaler": ("horizontalpodautoscalers", True),
    "PriorityClass": ("priorityclasses", False),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
    "PyTorchJob": ("pytorchjobs", True),
    "PaddleJob": ("paddlejobs", True),
    "MPIJob": ("mpijobs", True),
    "PodGroup": ("podgroups", True),
    "Queue": ("queues", False),
    "Job": ("jobs", True),
}


def collection_path(obj: dict[str, Any]) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural, namespaced = _PLURALS[kind]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        namespace = obj["metadata"].get("namespace") or "default"
        return f"{base}/namespaces/{namespace}/{plural}"
    return f"{base}/{plural}"


def object_path(obj: dict[str, Any]) -> str:
    return f"{collection_path(obj)}/{urllib.parse.quote(obj['metadata']['name'])}"


@contextlib.contextmanager
def envtest_server(
    prefix: str = "envtest-", extra_args: list[str] | None = None, crds: Path = CRDS
) -> Any:
    """An EnvTest in a temporary folder, stopped and removed on exit."""
    problem = assets_problem()
    if problem:
        raise RuntimeError(problem)
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with EnvTest(
            Path(os.environ[ASSETS_ENV]), root, crds=crds, extra_args=list(extra_args or [])
        ) as server:
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

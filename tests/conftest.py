"""Fixtures shared by the tests: the fake API server, the real one (envtest), the real
Volcano scheduler beside a real one (`volcano`), and the real training-operator beside
both (`kubeflow`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
import structlog
from fakekube import FakeKubeApi
from kubernetes_asyncio.client import ApiClient
from kubeserver import EnvTest, assets_problem, envtest_server
from operatorkit import TrainingOperator, operator_problem, training_operator
from promserver import HAVE_PROMETHEUS, SKIP_REASON, running_prometheus
from volcanokit import PLUGINS, RealVolcano, kit_problem, volcano_kit


@pytest.fixture(autouse=True)
def _no_autoscaler_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the caller's `AUTOSCALER_*` settings: each sets what it needs."""
    for name in list(os.environ):
        if name.startswith("AUTOSCALER_"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A command run in this process (cli.main) configures structlog for the whole
    process, as it should in a real one: `plan` keeps warnings only. The next test must
    start from the configuration this one found, or its captured info lines vanish."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApi]:
    """A fake API server on 127.0.0.1, stopped when the test ends."""
    async with FakeKubeApi() as server:
        yield server


@pytest.fixture
async def api(kube: FakeKubeApi) -> FakeKubeApi:
    """The same server, under the name the daemon-level tests use."""
    return kube


@pytest.fixture
async def client(kube: FakeKubeApi) -> AsyncIterator[ApiClient]:
    """The real kubernetes_asyncio client, pointed at the fake server."""
    async with ApiClient(kube.configuration()) as api_client:
        yield api_client


# ---- the real API server (envtest) ---------------------------------------------------------


@pytest.fixture(scope="session")
def envtest() -> Iterator[EnvTest]:
    """A real etcd + kube-apiserver with the real CRDs for the whole session.

    Skips where `KUBEBUILDER_ASSETS` does not hold the binaries. Tests share it: each works
    in its own namespace (`real_ns`) and names its cluster-scoped objects uniquely."""
    problem = assets_problem()
    if problem:
        pytest.skip(f"real API server: {problem}")
    with envtest_server() as server:
        yield server


@pytest.fixture
def real_ns(envtest: EnvTest) -> str:
    """A fresh namespace on the real API server (left behind: no namespace controller)."""
    return envtest.create_namespace()


@pytest.fixture
async def real_client(envtest: EnvTest) -> AsyncIterator[ApiClient]:
    """The real kubernetes_asyncio client, pointed at the real API server as admin."""
    async with ApiClient(envtest.configuration()) as api_client:
        yield api_client


# ---- the real Volcano scheduler (the kit in $VOLCANO_KIT) ------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=PLUGINS)
async def volcano(request: pytest.FixtureRequest) -> AsyncIterator[RealVolcano]:
    """A fresh API server with the real Volcano scheduler (`proportion`, then `capacity`
    plugin), controller-manager and kwok GPU nodes beside it, and a real Prometheus scraping
    both Volcano components every second; shared by a module's tests, one plugin at a time.

    Skips where the kit, the API server binaries or Prometheus are missing. Everything is
    stopped when the module is done, whatever the tests did."""
    problem = kit_problem()
    if problem:
        pytest.skip(f"real Volcano: {problem}")
    if not HAVE_PROMETHEUS:
        pytest.skip(SKIP_REASON)
    with volcano_kit(request.param) as kit:
        async with running_prometheus(kit.targets) as prometheus:
            yield RealVolcano(kit, prometheus)


# ---- the real training-operator beside them (the kit in $TRAINING_OPERATOR_KIT) -------------


@dataclass
class RealKubeflow(RealVolcano):
    """What the `kubeflow` fixture gives a test: the Volcano kit, Prometheus scraping it,
    and the real training-operator reconciling PyTorchJobs and PaddleJobs."""

    operator: TrainingOperator | None = None


KUBEFLOW_NODES = 6  # the seed's job: a Master and up to 5 hostNetwork Workers, one per node


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=PLUGINS)
async def kubeflow(request: pytest.FixtureRequest) -> AsyncIterator[RealKubeflow]:
    """A fresh API server, the real Volcano scheduler (`proportion`, then `capacity`) with
    6 kwok nodes of 8 GPUs, a real Prometheus scraping Volcano, and the real
    training-operator (started after Volcano, `--no-webhook`); shared by a module's tests,
    one plugin at a time. A test that needs one plugin only says so with
    `@pytest.mark.parametrize("kubeflow", ["proportion"], indirect=True)` and shares that
    plugin's stack.

    Skips where the operator, the kit, the API server binaries or Prometheus are missing.
    Everything is stopped when the module is done, whatever the tests did."""
    problem = operator_problem()
    if problem:
        pytest.skip(f"real training-operator: {problem}")
    if not HAVE_PROMETHEUS:
        pytest.skip(SKIP_REASON)
    with volcano_kit(request.param, nodes=KUBEFLOW_NODES) as kit:
        async with running_prometheus(kit.targets) as prometheus:
            with training_operator(kit) as operator:
                yield RealKubeflow(kit, prometheus, operator)

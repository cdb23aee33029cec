"""Fixtures shared by the tests: the fake API server, the real one (envtest), the real
Volcano scheduler beside a real one (`volcano`), and the real training-operator beside
both (`kubeflow`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pytest
import structlog
from fakekube import FakeKubeApi
from kubernetes_asyncio.client import ApiClient
from kubeserver import EnvTest, assets_problem, envtest_server
from operatorkit import TrainingOperator, operator_problem, training_operator
from promserver import HAVE_PROMETHEUS, SKIP_REASON, PrometheusProcess, prometheus_server
from volcanokit import PLUGINS, RealVolcano, VolcanoKit, kit_problem, volcano_kit


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


# ---- the real Volcano scheduler and training-operator (kits in $VOLCANO_KIT, ...) -----------


@dataclass
class RealKubeflow(RealVolcano):
    """What the `kubeflow` fixture gives a test: the Volcano kit, Prometheus scraping it,
    and the real training-operator reconciling PyTorchJobs and PaddleJobs."""

    operator: TrainingOperator | None = None


VOLCANO_NODES = 4  # what the `volcano` tests plan on: 4 nodes x 8 GPUs
KUBEFLOW_NODES = 6  # the seed's job: a Master and up to 5 hostNetwork Workers, one per node
# GKE, EKS and AKS run it: a pod asking for `nvidia.com/gpu` tolerates the GPU taint
API_ARGS = ("--enable-admission-plugins=ExtendedResourceToleration",)


@dataclass
class VolcanoCluster:
    """One plugin's stack for the whole session (a fresh one costs ~20 s): an API server,
    the Volcano kit and Prometheus scraping it; the training-operator runs only while
    `kubeflow` tests run (a `volcano` test's PyTorchJob gets no pods). Tests share it as
    they shared a module's: each in its own namespace and queues, left empty; the nodes
    are put back to the shape a test asks for before it starts."""

    kit: VolcanoKit
    prometheus: PrometheusProcess
    operator: TrainingOperator | None = None
    _operator_stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start_operator(self) -> TrainingOperator:
        if self.operator is None:
            self.operator = self._operator_stack.enter_context(training_operator(self.kit))
        return self.operator

    def stop_operator(self) -> None:
        self.operator = None
        self._operator_stack.close()


@pytest.fixture(scope="session", params=PLUGINS)
def volcano_cluster(request: pytest.FixtureRequest) -> Iterator[VolcanoCluster]:
    """A fresh API server with the real Volcano scheduler (`proportion`, then `capacity`
    plugin: pytest runs every test of one plugin before the other's), controller-manager
    and kwok GPU nodes beside it, and a real Prometheus scraping both Volcano components
    every second; for the session, one plugin at a time. A test that needs one plugin
    only says so with `@PROPORTION_ONLY` (below) and shares that plugin's stack.

    Skips where the kit, the API server binaries or Prometheus are missing. Everything is
    stopped when the session (or the plugin) is done, whatever the tests did."""
    problem = kit_problem()
    if problem:
        pytest.skip(f"real Volcano: {problem}")
    if not HAVE_PROMETHEUS:
        pytest.skip(SKIP_REASON)
    with contextlib.ExitStack() as stack:
        kit = stack.enter_context(
            volcano_kit(request.param, nodes=VOLCANO_NODES, api_args=API_ARGS)
        )
        cluster = VolcanoCluster(kit, stack.enter_context(prometheus_server(kit.targets)))
        stack.callback(cluster.stop_operator)
        yield cluster


PROPORTION_ONLY = pytest.mark.parametrize("volcano_cluster", ["proportion"], indirect=True)


@pytest.fixture
def volcano(volcano_cluster: VolcanoCluster) -> RealVolcano:
    """The session's stack of the test's plugin (`volcano_cluster`), its nodes 4 x 8 GPUs,
    no training-operator running."""
    volcano_cluster.stop_operator()
    volcano_cluster.kit.shape_nodes(VOLCANO_NODES)
    return RealVolcano(volcano_cluster.kit, volcano_cluster.prometheus)


@pytest.fixture
def kubeflow(volcano_cluster: VolcanoCluster) -> RealKubeflow:
    """The session's stack of the test's plugin with 6 nodes x 8 GPUs and the real
    training-operator (started after Volcano, `--no-webhook`) reconciling in it.

    Skips where the operator is missing (besides what `volcano_cluster` needs)."""
    problem = operator_problem()
    if problem:
        pytest.skip(f"real training-operator: {problem}")
    operator = volcano_cluster.start_operator()
    volcano_cluster.kit.shape_nodes(KUBEFLOW_NODES)
    return RealKubeflow(volcano_cluster.kit, volcano_cluster.prometheus, operator)


def _plugin(item: pytest.Item) -> str | None:
    """The Volcano plugin whose session stack `item` runs on, if any."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("volcano_cluster") if callspec else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on a Volcano stack run first, in the order pytest gave them (one plugin's
    after the other's, so each process starts each plugin's stack once). README's command
    runs the suite in two processes (pytest-xdist), each handed tests in this order: both
    start on the longest tests, which then do not finish last."""
    items[:] = [i for i in items if _plugin(i)] + [i for i in items if not _plugin(i)]

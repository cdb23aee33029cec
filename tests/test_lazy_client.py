"""The Kubernetes client's packages resolve names on first use (autoscaler/client/lazy_client.py):
the daemon does not import the ~800 generated modules it never uses, and every name of
the client stays what it was."""

from __future__ import annotations

import json
import subprocess
import sys

NAMES = """
import json, sys
import kubernetes_asyncio, kubernetes_asyncio.client as c, kubernetes_asyncio.client.models as m
import kubernetes_asyncio.client.api as a
out = {}
for mod in (kubernetes_asyncio, c, a, m):
    for name in sorted(set(mod.__all__)):
        value = getattr(mod, name)
        out[mod.__name__ + "." + name] = getattr(value, "__module__", None) or value.__name__
print(json.dumps(out))
"""


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout


def test_the_daemon_imports_none_of_the_clients_models_it_does_not_use():
    code = (
        "import sys, autoscaler.run.wiring, autoscaler.cli; "
        "print(sum(m.startswith('kubernetes_asyncio.client.models.') for m in sys.modules))"
    )
    assert int(_run(code)) < 20  # of ~750


def test_the_daemon_imports_none_of_the_clients_apis_it_does_not_use():
    """`kubernetes_asyncio.client.api`'s own `__init__` imports all 66 API classes
    (~12 MiB): importing `CustomObjectsApi` from its module must not run it."""
    code = (
        "import sys, autoscaler.run.wiring, autoscaler.cli, autoscaler.run.daemon\n"
        "from kubernetes_asyncio import client\n"
        "client.CoreV1Api, client.CoordinationV1Api  # the status writer's, the elector's\n"
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes_asyncio.client.api.')))"
    )
    assert _run(code).strip() == str(
        [
            "kubernetes_asyncio.client.api.coordination_v1_api",
            "kubernetes_asyncio.client.api.core_v1_api",
            "kubernetes_asyncio.client.api.custom_objects_api",
        ]
    )


def test_every_name_of_the_client_is_the_same_object_as_without_it():
    whole = json.loads(_run(NAMES))
    lazy = json.loads(_run("import autoscaler\n" + NAMES))
    assert len(whole) > 800
    assert lazy == whole


def test_the_clients_deserializer_finds_its_models():
    code = (
        "import autoscaler, asyncio\n"
        "from kubernetes_asyncio.client import ApiClient\n"
        "async def main():\n"
        "    async with ApiClient() as api:\n"
        "        body = {'spec': {'holderIdentity': 'a'}}\n"
        "        lease = api._ApiClient__deserialize(body, 'V1Lease')\n"
        "        print(type(lease).__name__, lease.spec.holder_identity)\n"
        "asyncio.run(main())\n"
    )
    assert _run(code).split() == ["V1Lease", "a"]

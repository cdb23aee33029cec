"""The real API server fixture: what the other real-server tests rely on it for."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from kubeserver import ApiError, EnvTest

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def _job(namespace: str, name: str, replicas: object = 1) -> dict[str, object]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "template": {
                        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]}
                    },
                }
            }
        },
    }


async def test_the_real_crds_are_served_with_managed_fields(
    envtest: EnvTest, real_ns: str, real_client: object
) -> None:
    envtest.create(_job(real_ns, "j"))
    api = CustomObjectsApi(real_client)
    got = await api.get_namespaced_custom_object(GROUP, VERSION, real_ns, PLURAL, "j")
    assert got["metadata"]["managedFields"][0]["manager"]
    # the CRD's schema is enforced: a string where the schema says integer is refused
    with pytest.raises(ApiError) as refused:
        envtest.create(_job(real_ns, "bad", replicas="two"))
    assert refused.value.status == 422
    # and a stale resourceVersion is a real 409
    stale = got["metadata"]["resourceVersion"]
    envtest.apply({**_job(real_ns, "j", replicas=2)})
    with pytest.raises(ApiException) as conflict:
        await api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            real_ns,
            PLURAL,
            "j",
            {
                "metadata": {"resourceVersion": stale},
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}},
            },
            _content_type="application/merge-patch+json",
        )
    assert conflict.value.status == 409


def test_api_server_restart_keeps_objects(envtest: EnvTest, real_ns: str) -> None:
    envtest.create(_job(real_ns, "kept"))
    envtest.stop_apiserver()
    with pytest.raises(OSError):
        envtest.request("GET", f"/api/v1/namespaces/{real_ns}")
    envtest.start_apiserver()
    kept = envtest.get(_job(real_ns, "kept"))
    assert kept["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1


async def test_a_minted_service_account_token_is_subject_to_rbac(
    envtest: EnvTest, real_ns: str
) -> None:
    envtest.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nobody", "namespace": real_ns},
        }
    )
    token = envtest.mint_token(real_ns, "nobody")
    with pytest.raises(ApiError) as forbidden:
        envtest.request(
            "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{real_ns}/{PLURAL}", token=token
        )
    assert forbidden.value.status == 403
    assert f"system:serviceaccount:{real_ns}:nobody" in forbidden.value.body

"""Which cluster we talk to: a kubeconfig (or the in-cluster config) read into an ApiClient.

kubectl's order: the `kubeconfig` setting, else $KUBECONFIG, else the in-cluster config,
else ~/.kube/config. A kubeconfig that cannot be used fails with one line naming the file
and the problem, before the client library turns it into a traceback. The credentials
loaded are registered for redaction (client.redact) as the client is made, and the
connection pool is sized for the watches the caches hold open. The proxy the
environment names for the API server (HTTPS_PROXY, NO_PROXY) is read once, here
(`_env_proxy`), not again on every request.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import yaml
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException
from yarl import URL

from autoscaler.client.redact import remember_client
from autoscaler.core.errors import yaml_error_line
from autoscaler.core.options import KubeOptions
from autoscaler.core.resources import JOB_RESOURCES

__all__ = [
    "POOL_SPARE",
    "KubeconfigError",
    "check_kubeconfig",
    "context_namespace",
    "kubeconfig_source",
    "make_api_client",
    "namespace_scopes",
    "watch_count",
]


class KubeconfigError(ValueError):
    """A kubeconfig file that cannot be used; str() names the file and the problem."""


def check_kubeconfig(path: Path, context: str = "") -> None:
    """Fail with one line naming the file and what is wrong with it, before the client
    library turns the same problem into a traceback or a riddle. With `context`, that
    context must exist (the current-context need not)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KubeconfigError(f"kubeconfig {path}: no such file") from None
    except IsADirectoryError:
        raise KubeconfigError(f"kubeconfig {path}: is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {why}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(yaml_error_line(path, exc, "kubeconfig not YAML")) from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a mapping (a Config object)")
    for key in ("clusters", "contexts", "users"):
        if not isinstance(doc.get(key), list) or not doc[key]:
            raise KubeconfigError(f"kubeconfig {path}: no {key}")
    names = [c.get("name") for c in doc["contexts"] if isinstance(c, dict)]
    if context:
        if context not in names:
            raise KubeconfigError(
                f"kubeconfig {path}: no context {context!r} (it has {', '.join(map(str, names))})"
            )
        return
    current = doc.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError(f"kubeconfig {path}: no current-context")
    if current not in names:
        raise KubeconfigError(
            f"kubeconfig {path}: current-context {current!r} is not among "
            f"its contexts ({', '.join(map(str, names))})"
        )


def kubeconfig_source(settings: KubeOptions) -> str | None:
    """The kubeconfig to use, as kubectl and controller-runtime pick it: the `kubeconfig`
    setting (--kubeconfig), else $KUBECONFIG (a list of files joined by the path
    separator), else None: in-cluster, falling back to ~/.kube/config. A context given
    without a file means a file: ~/.kube/config (in-cluster config has no contexts)."""
    if settings.kubeconfig:
        return str(settings.kubeconfig)
    env = os.environ.get("KUBECONFIG", "")
    if any(env.split(os.pathsep)):
        return env
    if settings.kube_context:
        return _home_kubeconfig()
    return None


IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(settings: KubeOptions) -> str:
    """The namespace kubectl would use without -n: the kubeconfig context's, else the
    pod's own in a cluster, else `default`."""
    source = kubeconfig_source(settings)
    if source is None and IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    paths = [p for p in (source or _home_kubeconfig()).split(os.pathsep) if p]
    wanted = settings.kube_context
    for path in paths:
        try:
            doc = yaml.safe_load(Path(os.path.expanduser(path)).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        name = wanted or doc.get("current-context")
        for ctx in doc.get("contexts") or []:
            if isinstance(ctx, dict) and ctx.get("name") == name:
                namespace = (ctx.get("context") or {}).get("namespace")
                return str(namespace) if namespace else "default"
    return "default"


def _check_files(source: str, context: str) -> None:
    """One file (the usual case) is checked whole; of a $KUBECONFIG list, which kubectl
    merges, only that the files exist (a part may hold the users, another the clusters)."""
    paths = [p for p in source.split(os.pathsep) if p]
    if len(paths) == 1:
        check_kubeconfig(Path(os.path.expanduser(paths[0])), context)
    elif not any(os.path.exists(os.path.expanduser(p)) for p in paths):
        raise KubeconfigError(f"KUBECONFIG={source}: none of these files exists")


def _home_kubeconfig() -> str:
    return os.path.expanduser("~/.kube/config")


def _check_default_kubeconfig(in_cluster: str) -> None:
    """~/.kube/config, checked like an explicit one when it exists; when it does not,
    nothing was found anywhere: one line saying where we looked, in kubectl's order (the
    client library would log `Config not found` and then blame the file's content)."""
    default = _home_kubeconfig()
    if os.path.exists(default):
        check_kubeconfig(Path(default))
        return
    raise KubeconfigError(
        "no kubeconfig found: looked for --kubeconfig (the kubeconfig setting): not given; "
        "$KUBECONFIG: not set; the in-cluster config: "
        f"{in_cluster.strip().rstrip('.') or 'not in a pod'}; {default}: no such file"
    )


async def make_api_client(settings: KubeOptions) -> ApiClient:
    """An ApiClient from the kubeconfig `kubeconfig_source` picks (with the `kube_context`
    setting's context), else the in-cluster config, else ~/.kube/config. A kubeconfig that
    cannot be used raises KubeconfigError."""

    configuration = Configuration()
    context = settings.kube_context or None
    source = kubeconfig_source(settings)
    if source is not None:
        _check_files(source, context or "")
        try:
            await kube_config.load_kube_config(
                config_file=source,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except ConfigException as exc:
            raise KubeconfigError(f"kubeconfig {source}: {exc}") from None
    else:
        try:
            # the one loader kubernetes_asyncio ships without annotations
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except ConfigException as in_cluster:
            _check_default_kubeconfig(str(in_cluster))
            try:
                await kube_config.load_kube_config(
                    config_file=_home_kubeconfig(),
                    client_configuration=configuration,
                    persist_config=False,
                )
            except (ConfigException, OSError) as default:
                raise ConfigException(
                    f"no Kubernetes configuration: not in a cluster ({in_cluster}) and no "
                    f"usable default kubeconfig ({default}); set kubeconfig"
                ) from default
    # Every cache holds one connection for its watch; lists, patches, Events and Lease
    # renewals must still find one free.
    kinds = len(settings.job_kinds) or len(JOB_RESOURCES)
    watches = watch_count(settings.namespaces, kinds, pods=settings.node_fit)
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize, watches + POOL_SPARE
    )
    # what was loaded (a token, a password) is masked wherever text from outside is logged
    remember_client(configuration)
    _env_proxy(configuration)
    client = ApiClient(configuration)
    # kubernetes_asyncio's session trusts the environment, so aiohttp looks up the proxy
    # and ~/.netrc again for every request, each in a thread of the default executor:
    # two thread hops before a LIST page is even asked for, each waiting for the GIL
    # while a page is decoded (a sync at 10k jobs makes ~200 such requests in a row;
    # docs/benchmarks.md). The proxy is read once instead (`_env_proxy`); .netrc never
    # applied to us (aiohttp refuses its credentials beside our Authorization header).
    client.rest_client.pool_manager._trust_env = False
    return client


def _env_proxy(configuration: Configuration) -> None:
    """The proxy the environment names for the API server's URL (HTTPS_PROXY, HTTP_PROXY,
    NO_PROXY, as aiohttp reads them for a session that trusts the environment), unless
    the kubeconfig named one: read once, as the URL never changes."""
    if configuration.proxy or not configuration.host:
        return
    try:
        proxy, auth = get_env_proxy_for_url(URL(configuration.host))
    except LookupError:  # none named, or NO_PROXY covers the server
        return
    configuration.proxy = str(proxy)
    if auth is not None:
        configuration.proxy_headers = {
            **(configuration.proxy_headers or {}),
            "Proxy-Authorization": auth.encode(),
        }


POOL_SPARE = 16  # connections beside the watches: lists, patches, Events, the Lease


def namespace_scopes(namespaces: Sequence[str]) -> list[str | None]:
    """The namespace scopes of the namespaced caches: each chosen namespace once, or
    one all-namespaces scope."""
    chosen = [ns.strip() for ns in namespaces if ns and ns.strip()]
    return list(dict.fromkeys(chosen)) or [None]


def watch_count(namespaces: Sequence[str], job_kinds: int, *, pods: bool) -> int:
    """The watches KubeSource holds open: per namespace scope one per job kind, one for
    PodGroups and one for HPAs; one each for Queues, PriorityClasses and Nodes; one for
    bound Pods."""
    return len(namespace_scopes(namespaces)) * (job_kinds + 2) + 3 + (1 if pods else 0)

"""elastic-autoscaler. The Kubernetes client's packages resolve their names on first
use (autoscaler/client/lazy_client.py): ~21 MiB less for the daemon."""

from autoscaler.client.lazy_client import install as _install_lazy_client

_install_lazy_client()

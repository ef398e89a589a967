"""Building the lightkube client: in-cluster, from kubeconfig, or an explicit URL.

An explicit server URL (`edl controller --server http://127.0.0.1:PORT`) is how
the tests point the real client code at kmock's emulator.
"""

from __future__ import annotations

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User

FIELD_MANAGER = "edl-controller"


def kube_config(server: str | None = None, namespace: str = "default") -> KubeConfig:
    """Configuration for `server` if given, else in-cluster / $KUBECONFIG / ~/.kube/config."""
    if server:
        return KubeConfig.from_one(cluster=Cluster(server=server), user=User(), namespace=namespace)
    return KubeConfig.from_env()


def make_client(server: str | None = None, *, timeout: float = 30.0) -> AsyncClient:
    """An AsyncClient that decodes eagerly and applies as edl's field manager."""
    return AsyncClient(
        kube_config(server),
        timeout=httpx2.Timeout(timeout),
        lazy=False,
        field_manager=FIELD_MANAGER,
    )

"""What node tests share besides fixtures: the cluster handle, the runtime's volumes, logs."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.control_plane import ControlPlane
from e2e.rest import Rest
from node.node import Node


@dataclass
class NodeCluster:
    """What a node test needs: the API as admin, a kubeconfig, the images pods use."""

    plane: ControlPlane
    node: Node
    rest: Rest
    kubeconfig: Path
    image: str
    etcd_image: str
    mounts: list[Path]


def runtime_volumes(cluster: NodeCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) for a pod of the runtime image: the claims `namespace` made."""
    volumes = [{"name": f"edl-runtime-{i}",
                "persistentVolumeClaim": {"claimName": f"edl-runtime-{i}", "readOnly": True}}
               for i in range(len(cluster.mounts))]
    mounts = [{"name": f"edl-runtime-{i}", "mountPath": str(path), "readOnly": True}
              for i, path in enumerate(cluster.mounts)]
    return volumes, mounts


def pod_log(cluster: NodeCluster, namespace: str, pod: str) -> str:
    """`kubectl logs`: the API server's pods/log, which it fetches from the kubelet."""
    request = urllib.request.Request(
        f"{cluster.plane.url}/api/v1/namespaces/{namespace}/pods/{pod}/log")
    with urllib.request.urlopen(request, context=cluster.plane.ssl_context(),
                                timeout=30) as answer:
        return str(answer.read().decode(errors="replace"))

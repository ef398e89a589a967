"""What node tests share besides fixtures: the cluster handle, the runtime's volumes, logs."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ROOT, ControlPlane
from e2e.helpers import CONTROLLER_ARGS, Controller, start_controller_process
from e2e.kueue import Kueue
from e2e.rest import Rest
from edl.local.progress import progress_key
from node.node import PAUSE_IMAGE, Node


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
    deleting: list[str] = field(default_factory=list)  # namespaces the session waits for
    controller_image: str = ""  # deploy/Dockerfile.controller's contract (tools/node/images.py)
    kueue: Future[Kueue] | None = None  # Kueue's start, when a collected test uses it


def runtime_volumes(cluster: NodeCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) for a pod of the runtime image: the claims `namespace` made."""
    volumes = [{"name": f"edl-runtime-{i}",
                "persistentVolumeClaim": {"claimName": f"edl-runtime-{i}", "readOnly": True}}
               for i in range(len(cluster.mounts))]
    mounts = [{"name": f"edl-runtime-{i}", "mountPath": str(path), "readOnly": True}
              for i, path in enumerate(cluster.mounts)]
    return volumes, mounts


def runtime_claims(cluster: NodeCluster, namespace: str) -> list[str]:
    """Read-only hostPath PersistentVolumes of the runtime's mounts and their claims
    `edl-runtime-<i>` in `namespace` (what `runtime_volumes` names); the volumes' names,
    cluster-scoped, for the caller to delete."""
    rest, volumes = cluster.rest, []
    for index, path in enumerate(cluster.mounts):
        claim, volume = f"edl-runtime-{index}", f"{namespace}-runtime-{index}"
        volumes.append(volume)
        rest.create({"apiVersion": "v1", "kind": "PersistentVolume",
                     "metadata": {"name": volume},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                              "persistentVolumeReclaimPolicy": "Retain",
                              "storageClassName": "edl-runtime",
                              "claimRef": {"namespace": namespace, "name": claim},
                              "hostPath": {"path": str(path), "type": "Directory"}}})
        rest.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": claim, "namespace": namespace},
                     "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": volume,
                              "storageClassName": "edl-runtime",
                              "resources": {"requests": {"storage": "1Gi"}}}}, namespace)
    return volumes


def controller_overlay(cluster: NodeCluster, directory: Path) -> Path:
    """A kustomize overlay of deploy/ (the base an admin applies with `kubectl apply -k`)
    for this node: the controller's Deployment gets the runtime's volumes (the claims
    `runtime_claims` made in edl-system), nothing else. `directory` is made and returned."""
    volumes, mounts = runtime_volumes(cluster)
    base = os.path.relpath(ROOT / "deploy", directory)  # kustomize refuses absolute paths
    patch = [{"op": "add", "path": "/spec/template/spec/volumes", "value": volumes},
             {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts",
              "value": mounts}]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [base],
        "patches": [{"target": {"kind": "Deployment", "name": "edl-controller"},
                     "patch": yaml.safe_dump(patch)}]}))
    return directory


def state_claim(cluster: NodeCluster, namespace: str, claim: str = "edl-state",
                access: str = "ReadWriteOnce") -> str:
    """A writable PersistentVolumeClaim `claim` in `namespace` for a job's state (etcd data,
    pserver checkpoints), bound to a hostPath PersistentVolume of its own: a directory in the
    node's work dir (removed with it). The PersistentVolume's name is returned; the caller
    deletes it. The directory is world-writable: the kubelet applies no fsGroup to hostPath,
    and etcd (65532) and the runtime (10001) both write there. `access`: the claim's access
    mode (ReadWriteMany for a volume every trainer pod shares)."""
    path = cluster.node.work / "state" / namespace / claim
    path.mkdir(parents=True)
    path.chmod(0o777)
    volume = f"{namespace}-{claim}"
    cluster.rest.create({"apiVersion": "v1", "kind": "PersistentVolume",
                         "metadata": {"name": volume},
                         "spec": {"capacity": {"storage": "1Gi"},
                                  "accessModes": [access],
                                  "persistentVolumeReclaimPolicy": "Retain",
                                  "storageClassName": "edl-state",
                                  "claimRef": {"namespace": namespace, "name": claim},
                                  "hostPath": {"path": str(path), "type": "Directory"}}})
    cluster.rest.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": claim, "namespace": namespace},
                         "spec": {"accessModes": [access], "volumeName": volume,
                                  "storageClassName": "edl-state",
                                  "resources": {"requests": {"storage": "1Gi"}}}}, namespace)
    return volume


def pod_log(cluster: NodeCluster, namespace: str, pod: str, container: str = "") -> str:
    """`kubectl logs [-c container]`: the API server's pods/log, which it fetches from the
    kubelet."""
    query = f"?container={container}" if container else ""
    request = urllib.request.Request(
        f"{cluster.plane.url}/api/v1/namespaces/{namespace}/pods/{pod}/log{query}")
    with urllib.request.urlopen(request, context=cluster.plane.ssl_context(),
                                timeout=30) as answer:
        return str(answer.read().decode(errors="replace"))


class PodWatch:
    """Every state a namespace's pods pass through, from a watch on the API server (a
    poll can miss a pod's last status: a preempted pod is gone a second after it ends).
    Use as a context manager; `seen` holds each pod's versions in order."""

    def __init__(self, cluster: NodeCluster, namespace: str, selector: str = "") -> None:
        query = "?watch=1&timeoutSeconds=600" + (f"&labelSelector={selector}" if selector else "")
        self._url = f"{cluster.plane.url}/api/v1/namespaces/{namespace}/pods{query}"
        self._context = cluster.plane.ssl_context()
        self._answer: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._seen: dict[str, list[dict[str, Any]]] = {}
        self._stop = threading.Event()

    def __enter__(self) -> PodWatch:
        self._answer = urllib.request.urlopen(self._url, context=self._context, timeout=600)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self._answer:
                if self._stop.is_set():
                    return
                event = json.loads(line)
                pod = event.get("object") or {}
                name = pod.get("metadata", {}).get("name")
                if name:
                    with self._lock:
                        self._seen.setdefault(name, []).append(pod)

    def __exit__(self, *exc: object) -> None:
        # not closed here: closing a response another thread is reading waits for that
        # read (the next event). The reader stops at its next event, or when the API
        # server ends the watch (timeoutSeconds) or stops.
        self._stop.set()

    def seen(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            return {name: list(versions) for name, versions in self._seen.items()}


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The pod's condition of type `kind`, if it has one."""
    return next((c for c in pod.get("status", {}).get("conditions") or []
                 if c.get("type") == kind), None)


def exit_code(pod: dict[str, Any], container: str) -> int | None:
    """The exit code of `container` if the pod's status shows it terminated."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == container and "terminated" in (status.get("state") or {}):
            return int(status["state"]["terminated"]["exitCode"])
    return None


def master_progress(cluster: NodeCluster, namespace: str, job: str) -> dict[str, Any] | None:
    """The master's progress record, read from the job's etcd (the master pod's sidecar)
    through the API server's proxy to that pod's `etcd` port (None if not readable now)."""
    # a master pod being deleted too (its etcd serves until it stops), after a live one
    pods = [p["metadata"]["name"] for p in sorted(
        cluster.rest.list("Pod", namespace, f"edl.dev/job={job},edl.dev/role=master"),
        key=lambda p: bool(p["metadata"].get("deletionTimestamp")))
        if p["status"].get("phase") == "Running"]
    if not pods:
        return None
    key = base64.b64encode(progress_key(namespace, job).encode()).decode()
    request = urllib.request.Request(
        f"{cluster.plane.url}/api/v1/namespaces/{namespace}/pods/http:{pods[0]}:2379/proxy"
        "/v3/kv/range", data=json.dumps({"key": key}).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=cluster.plane.ssl_context(),
                                    timeout=5) as answer:
            reply = json.loads(answer.read())
        kvs = reply.get("kvs") if isinstance(reply, dict) else None
        if not kvs:
            return None
        value: dict[str, Any] = json.loads(base64.b64decode(kvs[0]["value"]))
    except (OSError, ValueError):
        return None
    return value


def _cpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def free_cpu(cluster: NodeCluster) -> int:
    """The node's allocatable CPU less what its live pods request (millicores)."""
    rest = cluster.rest
    node = rest.get("Node", cluster.node.name)
    used = 0
    for pod in rest.list("Pod"):
        if pod["spec"].get("nodeName") != cluster.node.name or pod["status"].get(
                "phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            used += _cpu(container.get("resources", {}).get("requests", {}).get("cpu", "0"))
    return _cpu(node["status"]["allocatable"]["cpu"]) - used


def filler(namespace: str, cpu: int, name: str = "filler") -> dict[str, Any]:
    """A Deployment of one pause pod asking `cpu` millicores, with no PriorityClass
    (priority 0): another tenant taking room on the node, and giving it back when deleted."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "pause", "image": PAUSE_IMAGE,
                                         "resources": {"requests": {
                                             "cpu": f"{cpu}m", "memory": "16Mi"}}}]}}}}


@contextlib.contextmanager
def controllers(kubeconfig: Path, cluster: NodeCluster, logs: Path, *args: str
                ) -> Iterator[tuple[Callable[..., Controller], list[Controller]]]:
    """`start(identity, *extra)` runs `edl controller` with `kubeconfig`'s token, the
    node's images and `args`, its log under `logs`; every one started is stopped at the
    block's end (the list holds them, for what a test reads after)."""
    started: list[Controller] = []

    def start(identity: str = "node", *extra: str) -> Controller:
        controller = start_controller_process(
            kubeconfig, logs / f"controller-{identity}.log", identity, *CONTROLLER_ARGS,
            *args, f"--image={cluster.image}", f"--etcd-image={cluster.etcd_image}", *extra)
        started.append(controller)
        return controller

    try:
        yield start, started
    finally:
        for controller in started:
            controller.stop()

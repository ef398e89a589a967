"""Restart kube-apiserver under a running controller: its watches break, the new server's
watch cache no longer holds their resourceVersions (410 Gone), and the caches must relist
and carry on; the next ticks must see the cluster as it is."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from e2e.control_plane import ControlPlane
from e2e.helpers import filler, trainingjob, wait_tj, wait_trainers
from e2e.rest import Rest
from polling import wait_until


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return {k: float(v) for k, _, v in (line.rpartition(" ") for line in lines)
            if k.startswith("edl_")}


def requested_cpu_milli(rest: Rest) -> int:
    """What edl should count: the CPU requests of bound pods that are not finished."""
    total = 0
    for pod in rest.list("Pod"):
        if not pod["spec"].get("nodeName") or pod["status"].get("phase") in {"Succeeded",
                                                                            "Failed"}:
            continue
        for container in pod["spec"]["containers"]:
            cpu = container.get("resources", {}).get("requests", {}).get("cpu", "0")
            total += int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
    return total


def test_caches_resume_after_an_apiserver_restart(
        rest: Rest, plane: ControlPlane, namespace: str, start_controller,
        controller_kubeconfig: Path) -> None:
    # A leader that cannot renew its Lease within the renew deadline exits by design; the
    # API server is down for a few seconds here, so give the Lease production-like slack.
    controller = start_controller("replica-a", "--lease-duration=30", "--renew-deadline=20")
    rest.create(trainingjob("steady", min_instance=1, max_instance=4, trainer_cpu="1"),
                namespace)
    wait_trainers(rest, namespace, "steady", 4)

    # A freshly started kube-apiserver answers 403 for a moment, until its RBAC
    # authorizer's caches have filled: refusals in that window are the server's, not a
    # missing grant (they stop by themselves; everything later must pass).
    before = controller.offset()
    plane.restart_apiserver(down_for=2.0)
    # until then it refuses the controller's token (403): its authorizer's caches fill
    wait_until(lambda: plane.status_as(controller_kubeconfig, "/api/v1/pods?limit=1") == 200,
               60, "the restarted API server to authorize the controller")
    time.sleep(1)  # a request the server refused just before is logged just after
    controller.excused.append((before, controller.offset()))
    assert controller.proc.poll() is None, controller.text()[-3000:]

    # Pods watch: the filler (created after the restart) makes the job shrink.
    filler(rest, namespace, 40, cpu="1")
    wait_trainers(rest, namespace, "steady", 1, timeout=120)
    # TrainingJob watch (kopf): a job created after the restart gets its children.
    rest.create(trainingjob("after", min_instance=1, max_instance=2), namespace)
    wait_until(lambda: rest.find("Job", "after-trainer", namespace), 60, "after's children")
    # Nodes watch: a node added after the restart is counted.
    (extra,) = plane.add_nodes(1, prefix="kwok-extra")
    try:
        wait_until(lambda: metrics(controller.port).get("edl_cluster_nodes") == 5, 60,
                   "5 nodes in the controller's cache")
    finally:
        rest.delete("Node", extra)
    wait_until(lambda: metrics(controller.port).get("edl_cluster_nodes") == 4, 60,
               "the removed node forgotten")

    filler(rest, namespace, 0)
    wait_trainers(rest, namespace, "steady", 4, timeout=120)
    wait_tj(rest, namespace, "steady", lambda t: t["status"]["trainers"]["running"] == 4)

    # The cache agrees with the API server about every pod's requests.
    def agrees() -> bool:
        cached = metrics(controller.port).get('edl_cluster_requested{resource="cpu_milli"}')
        return cached == requested_cpu_milli(rest)
    wait_until(agrees, 30, "cached cpu requests == the API server's")
    restarts = {k: v for k, v in metrics(controller.port).items()
                if k.startswith("edl_watch_restarts")}
    assert restarts and all(v >= 1 for v in restarts.values()), restarts
    assert controller.proc.poll() is None

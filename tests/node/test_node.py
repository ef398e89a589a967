"""Pods on a real node (kubelet + containerd + runc): the node is Ready, a pod gets an IP on
the node's bridge, and a TrainingJob whose script raises at import fails as a cluster user
sees it: `kubectl logs` (the API server's pods/log, served by the kubelet) and the
TrainingJob's status show the script's own line, and the job stops at its backoffLimit.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from e2e.helpers import trainingjob, wait_tj
from node.cluster import NodeCluster, pod_log, runtime_volumes
from polling import wait_until

PSA = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn")}
PAUSE_UID, ETCD_UID = 65535, 65532
BROKEN = ('import sys\nprint("starting", flush=True)\n'
          'raise RuntimeError("broken at import: no model here")\n')


def pod_phase(cluster: NodeCluster, namespace: str, name: str) -> str:
    pod = cluster.rest.find("Pod", name, namespace)
    return "" if pod is None else pod.get("status", {}).get("phase", "")


def test_a_pod_runs_on_the_node_with_an_ip_on_its_bridge(
        node_cluster: NodeCluster, namespace: str) -> None:
    rest = node_cluster.rest
    node = rest.get("Node", node_cluster.node.name)
    assert {a["type"]: a["address"] for a in node["status"]["addresses"]}["InternalIP"] == \
        node_cluster.node.ip
    volumes, mounts = runtime_volumes(node_cluster)
    rest.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"},
                 "spec": {"restartPolicy": "Never", "volumes": volumes, "containers": [{
                     "name": "c", "image": node_cluster.image, "volumeMounts": mounts,
                     "command": ["python", "-c", "import os, edl; "
                                 "print('uid', os.getuid(), os.environ['HOME'])"]}]}},
                namespace)
    wait_until(lambda: pod_phase(node_cluster, namespace, "hello") == "Succeeded", 120,
               "pod hello Succeeded")
    pod = rest.get("Pod", "hello", namespace)
    bridge = ipaddress.ip_network(f"{node_cluster.node.ip}/{node_cluster.node.prefix}",
                                  strict=False)
    assert ipaddress.ip_address(pod["status"]["podIP"]) in bridge
    log = pod_log(node_cluster, namespace, "hello")
    assert log.strip() == "uid 10001 /home/edl", log


def _broken_job(cluster: NodeCluster, namespace: str) -> dict[str, Any]:
    cluster.rest.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken"},
                         "data": {"broken.py": BROKEN}}, namespace)
    volumes, mounts = runtime_volumes(cluster)
    job = trainingjob("broken", min_instance=2, max_instance=2, fault_tolerant=False)
    job["spec"]["image"] = cluster.image
    job["spec"]["trainer"]["entrypoint"] = "python broken.py"
    job["spec"]["trainer"]["workspace"] = "/workspace"
    job["spec"]["volumes"] = [*volumes, {"name": "script", "configMap": {"name": "broken"}}]
    job["spec"]["volumeMounts"] = [*mounts, {"name": "script", "mountPath": "/workspace"}]
    return job


def test_a_script_raising_at_import_shows_its_line_in_logs_and_status(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    rest = node_cluster.rest
    start_controller("broken", "--crash-backoff=1", "--crash-backoff-max=4")
    rest.create(_broken_job(node_cluster, namespace), namespace)
    tj = wait_tj(rest, namespace, "broken",
                 lambda t: t if t["status"]["state"] == "Failed" else None, timeout=300)
    message = tj["status"]["message"]
    # the script's own line (the exception it raised), after edl's words on the exit
    assert "status 1: RuntimeError: broken at import: no model here" in message, message

    pods = rest.list("Pod", namespace, "edl.dev/job=broken,edl.dev/role=trainer")
    failed = [p for p in pods if p["status"].get("phase") == "Failed"]
    assert failed, [p["status"].get("phase") for p in pods]
    log = pod_log(node_cluster, namespace, failed[0]["metadata"]["name"])
    assert "starting" in log and 'broken.py", line 3' in log, log
    assert "RuntimeError: broken at import: no model here" in log, log
    job = rest.get("Job", "broken-trainer", namespace)
    limit = job["spec"]["backoffLimit"]
    assert job["status"]["failed"] <= limit + 2, job["status"]


def test_restricted_namespace_runs_every_pod_as_10001_writing_only_home_and_tmp(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    rest = node_cluster.rest
    rest.merge("Namespace", namespace, {"metadata": {"labels": PSA}})
    start_controller("restricted")
    volumes, mounts = runtime_volumes(node_cluster)
    job = trainingjob("secure", min_instance=1, max_instance=1)
    job["spec"]["image"] = node_cluster.image
    job["spec"]["volumes"], job["spec"]["volumeMounts"] = volumes, mounts
    job["spec"]["pserver"]["min-instance"] = job["spec"]["pserver"]["max-instance"] = 1
    rest.create(job, namespace)
    wait_tj(rest, namespace, "secure",
            lambda t: t["status"]["state"] == "Running" and t["status"]["trainers"]["running"],
            240, "secure Running with a trainer")

    def running() -> list[dict[str, Any]]:
        pods = rest.list("Pod", namespace, "edl.dev/job=secure")
        return [p for p in pods if p["status"].get("phase") == "Running"]
    pods = wait_until(lambda: (found := running()) and {
        p["metadata"]["labels"]["edl.dev/role"] for p in found} == {
            "master", "pserver", "trainer"} and found, 120, "master, pserver and trainer")
    for pod in pods:
        name, role = pod["metadata"]["name"], pod["metadata"]["labels"]["edl.dev/role"]
        processes = node_cluster.node.pod_processes(pod["metadata"]["uid"])
        expected = {10001, PAUSE_UID} | ({ETCD_UID} if role == "master" else set())
        assert {p.uid for p in processes} == expected, (name, processes)
        for process in processes:
            if process.uid == 10001:
                stray = [f for f in process.written() if not f.startswith(("home/edl/", "tmp/"))]
                assert not stray, (name, stray)

"""Cluster DNS on the node as on a real cluster (CoreDNS, tests/node/cluster_dns.py): a pod's
resolv.conf, written by the kubelet from its `clusterDNS`, names the node's CoreDNS and the
namespace's search path, so a pod reaches a Service by its full name and by its short
name, a headless Service's name gives its ready pods' IPs, and a pod with a `hostname` and
`subdomain` is found by `<hostname>.<subdomain>` (the record a Job or StatefulSet's pods use).
"""

from __future__ import annotations

import json
from typing import Any

from node.cluster import NodeCluster, pod_log, runtime_volumes
from node.node import PAUSE_IMAGE
from polling import wait_until

# Runs in the client pod: every name's IPv4 addresses (or the resolver's error), the mean
# time of a lookup of the first two names, and the resolv.conf the kubelet wrote.
PROBE = """
import json, socket, sys, time
def lookup(name):
    try:
        return sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
    except socket.gaierror as error:
        return "error: " + str(error)
answers = {name: lookup(name) for name in sys.argv[1:]}
def mean_ms(name, n=50):
    start = time.perf_counter()
    for _ in range(n):
        lookup(name)
    return (time.perf_counter() - start) / n * 1000
answers["ms"] = {name: mean_ms(name) for name in sys.argv[1:3]}
answers["resolv.conf"] = open("/etc/resolv.conf").read()
print(json.dumps(answers))
"""


def _service(name: str, headless: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"app": "peer"},
                            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def _peer(index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"peer-{index}", "labels": {"app": "peer"}},
            "spec": {"hostname": f"peer-{index}", "subdomain": "peers",
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "pause", "image": PAUSE_IMAGE}]}}


def _ready_hostnames(cluster: NodeCluster, namespace: str) -> dict[str, str]:
    slices = cluster.rest.list("EndpointSlice", namespace, "kubernetes.io/service-name=peers")
    return {e.get("hostname", ""): e["addresses"][0] for s in slices
            for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")}


def test_a_pod_resolves_services_by_full_and_short_name_and_a_headless_service_to_pods(
        node_cluster: NodeCluster, namespace: str) -> None:
    rest, node = node_cluster.rest, node_cluster.node
    rest.create(_service("web", headless=False), namespace)
    rest.create(_service("peers", headless=True), namespace)
    for index in (0, 1):
        rest.create(_peer(index), namespace)
    peers = wait_until(lambda: (found := _ready_hostnames(node_cluster, namespace))
                       and len(found) == 2 and found, 120, "both peers ready in peers' slice")
    assert set(peers) == {"peer-0", "peer-1"}, peers
    web_ip = rest.get("Service", "web", namespace)["spec"]["clusterIP"]

    names = ["web", f"web.{namespace}.svc.cluster.local", "peers", "peer-1.peers",
             "kubernetes.default", "no-such-service"]
    volumes, mounts = runtime_volumes(node_cluster)
    rest.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
                 "spec": {"restartPolicy": "Never", "volumes": volumes, "containers": [{
                     "name": "c", "image": node_cluster.image, "volumeMounts": mounts,
                     "command": ["python", "-c", PROBE, *names]}]}}, namespace)
    wait_until(lambda: (pod := rest.find("Pod", "client", namespace)) is not None
               and pod["status"].get("phase") in ("Succeeded", "Failed"), 120,
               "pod client done")
    log = pod_log(node_cluster, namespace, "client")
    answers = json.loads(log.strip().splitlines()[-1])
    print("cluster DNS lookups from a pod (ms, mean of 50):",
          {name: round(ms, 3) for name, ms in answers["ms"].items()})

    resolv = answers["resolv.conf"].splitlines()
    assert f"nameserver {node.ip}" in resolv, resolv
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in resolv, \
        resolv
    assert answers["web"] == [web_ip], answers
    assert answers[f"web.{namespace}.svc.cluster.local"] == [web_ip], answers
    assert answers["peers"] == sorted(peers.values()), answers
    assert answers["peer-1.peers"] == [peers["peer-1"]], answers
    kubernetes_ip = rest.get("Service", "kubernetes", "default")["spec"]["clusterIP"]
    assert answers["kubernetes.default"] == [kubernetes_ip], answers
    assert str(answers["no-such-service"]).startswith("error: "), answers

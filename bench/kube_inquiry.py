"""Cluster accounting from watch caches vs list-and-sum each tick (5,000 nodes, 150,000 pods).

What is measured, in one run on this machine:

* **in-memory (edl)**: `edl.kube.state.ClusterState` fed pod by pod as the
  reflector feeds it (each pod dict folded into an O(1) ledger and dropped). One
  tick = what the autoscaler does: the `ClusterResource` snapshot + `job_pods`
  for 100 jobs. Watch events are applied as they arrive, between ticks; their
  cost is reported separately (1 % of pods changing phase/node per tick) and
  also added to the tick as a worst case (all of them landing right before it).
* **list and sum (baseline)**: what an adapter without caches does every tick:
  decode the API server's pod and node lists from JSON (the bytes are prepared
  once; the network and the API server's own cost are NOT counted, which
  flatters the baseline) and run `inquire_resource` over every pod.
* **memory**: bytes retained by the ClusterState (tracemalloc), against the
  decoded pod list the baseline needs every tick.

Targets: a tick under 100 ms, memory under 500 MB.
Run: .venv/bin/python bench/kube_inquiry.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
import tracemalloc
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from edl.accounting import inquire_resource
from edl.kube.state import ClusterState, NodeStore, PodStore

TARGET_TICK_S = 0.100
TARGET_MEMORY_MB = 500


def make_node(i: int, rng: random.Random) -> dict[str, Any]:
    cores = rng.choice((16, 32, 64))
    allocatable: dict[str, Any] = {"cpu": str(cores), "memory": f"{cores * 4}Gi", "pods": "110"}
    if i % 10 == 0:
        allocatable["nvidia.com/gpu"] = "4"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{i:05d}", "labels": {"kubernetes.io/hostname": f"node-{i}"},
                         "resourceVersion": str(i)},
            "status": {"allocatable": allocatable, "capacity": allocatable}}


def make_pod(i: int, nodes: int, jobs: int, rng: random.Random) -> dict[str, Any]:
    """A pod shaped like a real one (labels, env, probes) so decoding costs what it would."""
    job = i % (jobs * 3)
    trainer = job < jobs
    labels = ({"edl.dev/job": f"job-{job}", "edl.dev/role": "trainer"} if trainer
              else {"app": f"svc-{job}", "pod-template-hash": "5d4f8b9c7"})
    phase = "Running" if rng.random() < 0.97 else "Pending"
    spec: dict[str, Any] = {
        "containers": [{
            "name": "main", "image": "registry.example/app:1.2.3",
            "command": ["python", "-m", "app"],
            "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(6)],
            "resources": {"requests": {"cpu": rng.choice(("100m", "250m", "500m", "1")),
                                       "memory": rng.choice(("128Mi", "256Mi", "1Gi"))},
                          "limits": {"cpu": "2", "memory": "2Gi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        }],
        "restartPolicy": "Always", "serviceAccountName": "default",
    }
    if phase == "Running":
        spec["nodeName"] = f"node-{rng.randrange(nodes):05d}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i:06d}", "namespace": f"ns-{i % 50}", "labels": labels,
                         "uid": f"00000000-0000-0000-0000-{i:012d}",
                         "resourceVersion": str(10_000 + i)},
            "spec": spec,
            "status": {"phase": phase, "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def churn(pods: list[dict[str, Any]], count: int, nodes: int,
          rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """`count` watch events: pods that start running, move, or go back to pending.

    `pods` (the server's truth) is updated too; the baseline re-encodes nothing, so
    it lists the state before the churn: the same work either way.
    """
    events = []
    for _ in range(count):
        index = rng.randrange(len(pods))
        pod = dict(pods[index])
        spec = dict(pod["spec"])
        if rng.random() < 0.5:
            spec["nodeName"] = f"node-{rng.randrange(nodes):05d}"
            status = {**pod["status"], "phase": "Running"}
        else:
            spec.pop("nodeName", None)
            status = {**pod["status"], "phase": "Pending"}
        pod["spec"], pod["status"] = spec, status
        pods[index] = pod  # the "server side" changes too, so both sides stay comparable
        events.append(("MODIFIED", pod))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 nodes, 15,000 pods")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--baseline-ticks", type=int, default=3)
    args = parser.parse_args()
    n_nodes, n_pods = (500, 15_000) if args.quick else (5_000, 150_000)
    n_jobs = 100
    console = Console(width=130)
    rng = random.Random(2017)

    with Progress(console=console, transient=True) as progress:
        step = progress.add_task("generating nodes and pods", total=n_nodes + n_pods)
        nodes = [make_node(i, rng) for i in range(n_nodes)]
        progress.advance(step, n_nodes)
        pods = []
        for i in range(n_pods):
            pods.append(make_pod(i, n_nodes, n_jobs, rng))
            if i % 5000 == 0:
                progress.advance(step, 5000)
        node_bytes = json.dumps({"kind": "NodeList", "items": nodes}).encode()
        pod_bytes = json.dumps({"kind": "PodList", "items": pods}).encode()

        # Memory retained by the in-memory state, fed one object at a time.
        progress.update(step, description="building the in-memory state (tracemalloc)")
        gc.collect()
        tracemalloc.start()
        state = ClusterState()
        node_store, pod_store = NodeStore(state), PodStore(state)
        for obj in nodes:
            node_store.apply("ADDED", json.loads(json.dumps(obj)))
        for obj in pods:
            pod_store.apply("ADDED", json.loads(json.dumps(obj)))  # a fresh dict, as decoded
        gc.collect()
        state_bytes, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        # Memory of what the baseline decodes every tick.
        gc.collect()
        tracemalloc.start()
        decoded = json.loads(pod_bytes)
        list_bytes, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del decoded

        # Initial list into the state, timed (no tracemalloc).
        progress.update(step, description="timing the initial list")
        started = time.perf_counter()
        timed_state = ClusterState()
        timed_nodes, timed_pods = NodeStore(timed_state), PodStore(timed_state)
        timed_nodes.begin_replace()
        for obj in json.loads(node_bytes)["items"]:
            timed_nodes.apply("ADDED", obj)
        timed_nodes.end_replace()
        timed_pods.begin_replace()
        for obj in json.loads(pod_bytes)["items"]:
            timed_pods.apply("ADDED", obj)
        timed_pods.end_replace()
        initial_list_s = time.perf_counter() - started

        ticks = progress.add_task("ticks", total=args.ticks + args.baseline_ticks)
        edl_ticks, event_ticks, snapshot_ticks = [], [], []
        job_names = [(f"ns-{j % 50}", f"job-{j}") for j in range(n_jobs)]
        for _ in range(args.ticks):
            events = churn(pods, n_pods // 100, n_nodes, rng)
            started = time.perf_counter()
            for kind, obj in events:
                timed_pods.apply(kind, obj)
            applied = time.perf_counter()
            resources = timed_state.resources()
            for namespace, name in job_names:
                timed_state.job_pods(namespace, name)
            done = time.perf_counter()
            edl_ticks.append(done - started)
            event_ticks.append(applied - started)
            snapshot_ticks.append(done - applied)
            progress.advance(ticks)

        baseline_ticks, sum_only = [], []
        for _ in range(args.baseline_ticks):
            started = time.perf_counter()
            listed_nodes = json.loads(node_bytes)["items"]
            listed_pods = json.loads(pod_bytes)["items"]
            decoded_at = time.perf_counter()
            baseline = inquire_resource(listed_nodes, listed_pods)
            done = time.perf_counter()
            baseline_ticks.append(done - started)
            sum_only.append(done - decoded_at)
            del listed_pods, listed_nodes
            progress.advance(ticks)

    # Same accounting: the cached state equals a full inquiry over the same objects.
    check = inquire_resource(json.loads(node_bytes)["items"], pods)
    assert timed_state.resources() == check, "cached state diverged from a full inquiry"
    assert resources.node_count == baseline.node_count == n_nodes

    edl_tick = statistics.median(snapshot_ticks)
    with_events = statistics.median(edl_ticks)
    per_event_us = statistics.median(event_ticks) / (n_pods // 100) * 1e6
    base_tick = statistics.median(baseline_ticks)
    table = Table(title=f"Cluster accounting: {n_nodes:,} nodes, {n_pods:,} pods "
                        f"(median of {args.ticks} ticks)")
    for column in ("figure", "in-memory (edl)", "list and sum", "ratio", "target"):
        table.add_column(column, justify="right")
    mb = 1024 * 1024
    table.add_row("tick (snapshot + 100 job_pods)", f"{edl_tick * 1000:.1f} ms",
                  f"{base_tick * 1000:.0f} ms", f"{base_tick / edl_tick:.0f}x faster",
                  f"< {TARGET_TICK_S * 1000:.0f} ms")
    table.add_row(f"watch events between ticks ({n_pods // 100:,})",
                  f"{statistics.median(event_ticks) * 1000:.1f} ms ({per_event_us:.0f} µs each)",
                  "-", "", "")
    table.add_row("tick + all those events at once", f"{with_events * 1000:.1f} ms",
                  f"{base_tick * 1000:.0f} ms", f"{base_tick / with_events:.0f}x faster", "")
    table.add_row("  baseline sum only (no JSON decode)", "-",
                  f"{statistics.median(sum_only) * 1000:.0f} ms", "", "")
    table.add_row("memory", f"{state_bytes / mb:.0f} MB",
                  f"{list_bytes / mb:.0f} MB (decoded list)",
                  f"{list_bytes / state_bytes:.1f}x less", f"< {TARGET_MEMORY_MB} MB")
    table.add_row("initial list into the state", f"{initial_list_s:.1f} s", "", "", "once")
    console.print(table)
    ok = edl_tick < TARGET_TICK_S and state_bytes / mb < TARGET_MEMORY_MB
    console.print(f"targets {'met' if ok else 'MISSED'}: tick {edl_tick * 1000:.1f} ms "
                  f"({with_events * 1000:.1f} ms with a tick's events), "
                  f"memory {state_bytes / mb:.0f} MB")


if __name__ == "__main__":
    main()

"""Write the example cluster snapshots that `edl plan` reads.

Run: .venv/bin/python examples/snapshots/generate.py

`training-and-service.json`: a small cluster in the shape of `kubectl get
nodes,pods,trainingjobs,jobs -A -o json` — 12 nodes (16 and 20 cores), four
elastic TrainingJobs rendered by edl's own JobParser (one submitted early that
holds most trainers, two late ones at min-instance, one whose trainer Job is
not created yet), one TrainingJob with a bad field, and an nginx service
scaling up whose new pods fit on no node although the cluster is not full.
`training-and-service.yaml` is the same List as YAML.

Everything is deterministic: run it again and the files do not change.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from edl.jobparser import JobParser

HERE = Path(__file__).parent
NAMESPACE = "research"


def uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.edl.example"))


def node(name: str, cores: int) -> dict[str, Any]:
    resources = {"cpu": str(cores), "memory": "128Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid(name), "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": resources, "allocatable": resources},
    }


def pod(
    name: str,
    namespace: str,
    labels: dict[str, str],
    container: dict[str, Any],
    node_name: str | None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(f"{namespace}/{name}"),
        "labels": labels,
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
    status: dict[str, Any] = {"phase": "Pending"}
    if node_name:
        spec["nodeName"] = node_name
        status = {"phase": "Running"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def training_job(name: str, min_instance: int, max_instance: int) -> dict[str, Any]:
    return {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid(name)},
        "spec": {
            "image": "ghcr.io/edl-dev/edl-runtime:0.1.0",
            "fault_tolerant": True,
            "trainer": {
                "entrypoint": "python -m edl.examples.mnist",
                "workspace": "/workspace",
                "min-instance": min_instance,
                "max-instance": max_instance,
                "resources": {
                    "requests": {"cpu": "5", "memory": "8Gi"},
                    "limits": {"cpu": "7500m", "memory": "8Gi"},
                },
            },
            "pserver": {
                "min-instance": 2,
                "max-instance": 2,
                "resources": {
                    "requests": {"cpu": "4", "memory": "5Gi"},
                    "limits": {"cpu": "6", "memory": "5Gi"},
                },
            },
        },
        "status": {"state": "Running"},
    }


class Scheduler:
    """First-fit by CPU request, enough to lay out a believable snapshot."""

    def __init__(self, nodes: dict[str, int]) -> None:
        self.idle = {name: cores * 1000 for name, cores in nodes.items()}

    def bind(self, cpu_milli: int) -> str | None:
        for name, idle in self.idle.items():
            if idle >= cpu_milli:
                self.idle[name] -= cpu_milli
                return name
        return None


def build() -> dict[str, Any]:
    cores = {f"node-{i:02d}": 16 if i < 7 else 20 for i in range(12)}
    items: list[dict[str, Any]] = [node(name, c) for name, c in cores.items()]
    scheduler = Scheduler(cores)
    parser = JobParser()

    # trainers running per job: "early" was alone for a while and grew
    for name, running, min_instance in (("early", 24, 2), ("late-a", 2, 2), ("late-b", 2, 2)):
        tj = training_job(name, min_instance, 60)
        items.append(tj)
        trainer_job = parser.parse_to_trainer(tj)
        trainer_job["metadata"]["uid"] = uid(f"{name}-trainer")
        selector = {"batch.kubernetes.io/controller-uid": trainer_job["metadata"]["uid"]}
        trainer_job["spec"]["parallelism"] = running
        trainer_job["spec"]["selector"] = {"matchLabels": selector}
        trainer_job["status"] = {"active": running}
        items.append(trainer_job)
        template = trainer_job["spec"]["template"]
        labels = {**template["metadata"]["labels"], **selector}
        container = template["spec"]["containers"][0]
        for index in range(2):  # pservers
            items.append(
                pod(
                    f"{name}-pserver-{index}",
                    NAMESPACE,
                    {"edl.dev/job": name, "edl.dev/role": "pserver"},
                    {"name": "pserver", "resources": tj["spec"]["pserver"]["resources"]},
                    scheduler.bind(4000),
                )
            )
        for index in range(running):
            items.append(
                pod(
                    f"{name}-trainer-{index:02d}",
                    NAMESPACE,
                    labels,
                    container,
                    scheduler.bind(5000),
                    owner=trainer_job,
                )
            )

    # submitted a moment ago: the controller has not created its trainer Job yet
    items.append(training_job("just-submitted", 2, 20))
    # a job with a bad quantity is reported, not a reason to fail the plan
    broken = training_job("broken", 2, 10)
    broken["spec"]["trainer"]["resources"]["requests"]["cpu"] = "five"
    items.append(broken)

    # nginx: 3 cores per replica; a few bound, then a scale-up that fits nowhere
    nginx = {"name": "nginx", "resources": {"requests": {"cpu": "3", "memory": "3Gi"}}}
    for index in range(14):
        bound = scheduler.bind(3000) if index < 10 else None  # 4 just created, unscheduled
        items.append(pod(f"nginx-{index:02d}", "web", {"app": "nginx"}, nginx, bound))
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def main() -> None:
    snapshot = build()
    (HERE / "training-and-service.json").write_text(json.dumps(snapshot, indent=2) + "\n")
    (HERE / "training-and-service.yaml").write_text(
        yaml.safe_dump(snapshot, sort_keys=False, width=100)
    )


if __name__ == "__main__":
    main()

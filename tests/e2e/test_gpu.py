"""A GPU TrainingJob on a tainted, labelled kwok GPU pool against the real kube-scheduler.

The GPU nodes carry `nvidia.com/gpu=present:NoSchedule`, a label and an `nvidia.com/gpu`
allocatable (as the device plugin reports it); the job's trainers tolerate the taint,
select the label and ask for one GPU each. edl grows the job to exactly the GPUs there
are, every trainer lands on a GPU node and none anywhere else, no trainer waits for room
it was promised, `status.plan` names the pool that bounds it, and `edl plan` on a
snapshot of the cluster decides the same."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from e2e.control_plane import ControlPlane
from e2e.helpers import parallelism, trainingjob, wait_tj
from e2e.rest import Rest
from e2e.snapshot import edl_plan
from polling import wait_until

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
POOL = {"nvidia.com/gpu.present": "true"}
GPUS_PER_NODE = 2


def _gpu_job() -> dict[str, Any]:
    job = trainingjob("gpu", min_instance=1, max_instance=20, trainer_cpu="500m")
    trainer = job["spec"]["trainer"]
    trainer["resources"]["requests"]["nvidia.com/gpu"] = "1"
    trainer["resources"].setdefault("limits", {})["nvidia.com/gpu"] = "1"
    trainer["nodeSelector"] = dict(POOL)
    trainer["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                               "effect": "NoSchedule"}]
    return job


def _gpu_node(rest: Rest, name: str) -> None:
    """Taint and label `name` and give it GPUS_PER_NODE GPUs, as a device plugin would."""
    rest.merge("Node", name, {"metadata": {"labels": POOL}, "spec": {"taints": [TAINT]}})
    node = rest.get("Node", name)
    gpus = {"nvidia.com/gpu": str(GPUS_PER_NODE)}
    rest.merge("Node", name, {"status": {
        "capacity": {**node["status"]["capacity"], **gpus},
        "allocatable": {**node["status"]["allocatable"], **gpus}}}, sub="status")
    wait_until(lambda: rest.get("Node", name)["status"]["allocatable"].get("nvidia.com/gpu")
               == str(GPUS_PER_NODE), 30, f"{name} reports its GPUs")


def test_a_gpu_job_grows_onto_tainted_gpu_nodes_and_never_onto_others(
    rest: Rest, plane: ControlPlane, namespace: str, start_controller, tmp_path: Path
) -> None:
    gpu_nodes = plane.add_nodes(2, prefix="kwok-gpu")
    try:
        for name in gpu_nodes:
            _gpu_node(rest, name)
        # max load 1: the pool's every GPU may be planned (the default keeps GPU limits
        # under 97% of the cluster's, which on 4 GPUs is 3)
        start_controller("replica-a", "--max-load=1.0")
        rest.create(_gpu_job(), namespace)
        gpus = GPUS_PER_NODE * len(gpu_nodes)
        tj = wait_tj(rest, namespace, "gpu",
                     lambda t: t if t["status"]["plan"]["target"] == gpus else None,
                     timeout=120, label=f"the plan at the pool's {gpus} GPUs")
        assert "nvidia.com/gpu.present=true" in tj["status"]["plan"]["reason"], tj["status"]

        def settled() -> list[dict] | None:
            pods = [p for p in rest.list("Pod", namespace, "edl.dev/job=gpu,edl.dev/role=trainer")
                    if not p["metadata"].get("deletionTimestamp")]
            if len(pods) != parallelism(rest, namespace, "gpu"):
                return None
            return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

        pods = wait_until(settled, 90, "every planned GPU trainer running")
        assert len(pods) == gpus
        assert {p["spec"]["nodeName"] for p in pods} == set(gpu_nodes)
        time.sleep(5)  # a few more autoscaler ticks: no growth past the GPUs
        assert parallelism(rest, namespace, "gpu") == gpus
        everything = rest.list("Pod", namespace)
        on_gpu = {p["metadata"]["name"] for p in everything
                  if p["spec"].get("nodeName") in gpu_nodes}
        assert on_gpu == {p["metadata"]["name"] for p in pods}, on_gpu  # no master/pserver
        row = edl_plan(rest, tmp_path / "snapshot.json", "--max-load=1.0")[(namespace, "gpu")]
        assert (row["parallelism"], row["target"]) == (gpus, gpus), row
    finally:
        rest.delete("TrainingJob", "gpu", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        for name in gpu_nodes:
            rest.delete("Node", name)

"""The GPU pool walkthrough of docs/kubernetes.md, followed literally, on the real control
plane: GPU nodes labelled, tainted and given `nvidia.com/gpu` (as a device plugin reports
it), the namespace's quota (`requests.nvidia.com/gpu=8, requests.cpu=64, count/pods=40`)
and LimitRange (`min`, `defaultRequest`, `default`, `maxLimitRequestRatio`) read from the
page, and the page's GPU job (`gpu-job.yaml`). Every pod of the job is created (the quota
and the LimitRange admit the master, its etcd sidecar and the pserver), a bare controller
(max load 0.97) grows the job to exactly the GPUs there are, every trainer lands on a GPU
node and none anywhere else, `status.plan` names the pool that bounds it, and `edl plan`
on a snapshot decides the same."""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ROOT, ControlPlane
from e2e.helpers import parallelism, wait_tj
from e2e.rest import Rest
from e2e.snapshot import edl_plan
from polling import wait_until

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
POOL = {"nvidia.com/gpu.present": "true"}
GPUS_PER_NODE = 2
# room for two of the page's trainers (1 GPU, 4 CPU, 16Gi each) per node, and no more
GPU_NODE = {"cpu": "9", "memory": "36Gi", "nvidia.com/gpu": str(GPUS_PER_NODE)}
PAGE = ROOT / "docs" / "kubernetes.md"


def page_yaml(after: str) -> dict[str, Any]:
    """The first YAML block of docs/kubernetes.md after the text `after`."""
    text = PAGE.read_text()
    block = re.search(r"```yaml\n(.*?)```", text[text.index(after):], re.S)
    assert block is not None, after
    return yaml.safe_load(textwrap.dedent(block.group(1)))


def page_quota() -> dict[str, str]:
    """Step 3's `kubectl create quota gpu-cap ... --hard=...` as a ResourceQuota's hard."""
    (hard,) = re.findall(r"kubectl create quota gpu-cap -n team-a \\\s+--hard=(\S+)",
                         PAGE.read_text())
    return dict(item.split("=") for item in hard.split(","))


def test_the_gpu_pool_walkthrough_followed_literally(
    rest: Rest, plane: ControlPlane, namespace: str, start_controller, tmp_path: Path
) -> None:
    # step 1: the pool's nodes labelled, tainted, with the device plugin's count
    gpu_nodes = plane.add_nodes(2, prefix="kwok-gpu", allocatable=GPU_NODE, labels=POOL,
                                taints=[TAINT])
    try:
        # step 3: the page's quota and LimitRange in the team's namespace
        hard = page_quota()
        assert hard == {"requests.nvidia.com/gpu": "8", "requests.cpu": "64",
                        "count/pods": "40"}
        rest.create({"apiVersion": "v1", "kind": "ResourceQuota",
                     "metadata": {"name": "gpu-cap"}, "spec": {"hard": hard}}, namespace)
        limits = page_yaml("A LimitRange in the namespace works as well")
        assert limits["kind"] == "LimitRange"
        assert {"min", "defaultRequest", "maxLimitRequestRatio"} <= set(limits["spec"]["limits"][0])
        limits["metadata"]["namespace"] = namespace
        rest.create(limits, namespace)
        # step 4: the page's gpu-job.yaml, as it is
        job = page_yaml("**A GPU job on tainted GPU nodes.**")
        assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == (
            "edl.dev/v1", "TrainingJob", "gpu-job")
        # a bare controller's settings: max load 0.97 (which holds back no whole GPU) and
        # the trainers' PriorityClass of step 2 (applied with the plane)
        start_controller("replica-a", "--trainer-priority-class=edl-elastic-trainer")
        rest.create(job, namespace)
        gpus = GPUS_PER_NODE * len(gpu_nodes)
        tj = wait_tj(rest, namespace, "gpu-job",
                     lambda t: t if t["status"]["plan"]["target"] == gpus else None,
                     timeout=120, label=f"the plan at the pool's {gpus} GPUs")
        assert "nvidia.com/gpu.present=true" in tj["status"]["plan"]["reason"], tj["status"]

        def settled() -> list[dict] | None:
            pods = [p for p in rest.list("Pod", namespace, "edl.dev/job=gpu-job")
                    if not p["metadata"].get("deletionTimestamp")]
            trainers = [p for p in pods if p["metadata"]["labels"]["edl.dev/role"] == "trainer"]
            if len(pods) != 2 + gpus or len(trainers) != parallelism(rest, namespace, "gpu-job"):
                return None
            return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

        # every pod of the job: the master (with its etcd sidecar), one pserver, the trainers
        pods = wait_until(settled, 90, "every pod of the job created and running")
        roles = sorted(p["metadata"]["labels"]["edl.dev/role"] for p in pods)
        assert roles == ["master", "pserver", *["trainer"] * gpus], roles
        trainers = [p for p in pods if p["metadata"]["labels"]["edl.dev/role"] == "trainer"]
        assert {p["spec"]["nodeName"] for p in trainers} == set(gpu_nodes)
        on_gpu = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] in gpu_nodes}
        assert on_gpu == {p["metadata"]["name"] for p in trainers}  # no master/pserver
        events = [e for e in rest.list("Event", namespace) if e["reason"] == "FailedCreate"]
        assert not events, [e["message"] for e in events]
        tj = rest.get("TrainingJob", "gpu-job", namespace)
        assert tj["status"]["state"] == "Running", tj["status"]
        time.sleep(5)  # a few more autoscaler ticks: no growth past the GPUs
        assert parallelism(rest, namespace, "gpu-job") == gpus
        assert {p["spec"].get("priorityClassName") for p in trainers} == {"edl-elastic-trainer"}
        row = edl_plan(rest, tmp_path / "snapshot.json")[(namespace, "gpu-job")]
        assert (row["parallelism"], row["target"]) == (gpus, gpus), row
    finally:
        rest.delete("TrainingJob", "gpu-job", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        for name in gpu_nodes:
            rest.delete("Node", name)

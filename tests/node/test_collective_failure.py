"""A collective script that raises after `init_process_group`, on the real node: two
trainer pods run torch's agents under `edl agent`, form a gloo world through the
rendezvous Service, each rank raises, and the TrainingJob ends Failed with the script's
own line in its status and its Failed condition, not a peer's RendezvousClosedError.

`max-restarts: 0`: a failure ends its pod (no torch restarts inside it) and closes the
job's rendezvous, so the replacements fail at once with RendezvousClosedError and the job
reaches its backoffLimit (6: 7 failed pods) after one pair of torch starts, not 21.
Only the newest 3 failed pods are kept, so the pods with the script's line are gone by
then; their line lives on in the status."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.helpers import trainingjob, wait_tj
from node.cluster import NodeCluster, pod_log, runtime_volumes

SCRIPT = ('import torch.distributed as dist\n'
          'dist.init_process_group("gloo")\n'
          'print("joined rank", dist.get_rank(), "of", dist.get_world_size(), flush=True)\n'
          'raise ValueError("bad learning rate: -1")\n')
LINE = "ValueError: bad learning rate: -1"
pytestmark = pytest.mark.timeout(600)  # two torch starts per attempt on a loaded machine


def _job(cluster: NodeCluster, namespace: str) -> dict[str, Any]:
    cluster.rest.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "raising"}, "data": {"train.py": SCRIPT}},
                        namespace)
    volumes, mounts = runtime_volumes(cluster)
    job = trainingjob("raising", min_instance=2, max_instance=2)
    spec = job["spec"]
    for key in ("pserver", "passes", "ports_num", "ports_num_for_sparse"):
        spec.pop(key, None)
    spec.update(mode="collective", image=cluster.image, collective={"world-sizes": [2],
                                                                  "max-restarts": 0})
    spec["trainer"].update(entrypoint="python train.py", workspace="/workspace",
                           env=[{"name": "EDL_CHECKPOINT_DIR", "value": "/tmp/ckpt"}])
    spec["volumes"] = [*volumes, {"name": "script", "configMap": {"name": "raising"}}]
    spec["volumeMounts"] = [*mounts, {"name": "script", "mountPath": "/workspace"}]
    return job


def test_a_collective_script_raising_after_init_fails_the_job_with_its_line(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    rest = node_cluster.rest
    start_controller("raising", "--crash-backoff=1", "--crash-backoff-max=4")
    rest.create(_job(node_cluster, namespace), namespace)
    tj = wait_tj(rest, namespace, "raising",
                 lambda t: t if t["status"]["state"] == "Failed" else None, timeout=420)
    message = tj["status"]["message"]
    assert LINE in message, message
    failed = next(c for c in tj["status"]["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and LINE in failed["message"]

    # the script reaches its raise only once init_process_group has returned: a world of 2
    # formed across the two pods; every failed pod left says why in `kubectl logs`
    pods = rest.list("Pod", namespace, "edl.dev/job=raising,edl.dev/role=trainer")
    failures = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Failed"]
    assert failures, [p["status"].get("phase") for p in pods]
    for name in failures:
        last = pod_log(node_cluster, namespace, name).strip().splitlines()[-1]
        assert last.startswith("edl agent: entrypoint 'python train.py' failed"), last

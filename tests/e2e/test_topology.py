"""A job's own required pod anti-affinity against the real kube-scheduler: on 4 nodes a
job of max 8 trainers that must not share a node ends with the target equal to the 4
trainers that can run (one per node), not 8 with 4 Pending for ever."""

from __future__ import annotations

from e2e.control_plane import ControlPlane
from e2e.helpers import trainingjob, wait_tj
from e2e.rest import Rest
from polling import wait_until


def test_anti_affinity_on_hostname_target_is_the_trainers_that_can_run(
    rest: Rest, plane: ControlPlane, namespace: str, start_controller
) -> None:
    nodes = plane.add_nodes(4, prefix="kwok-apart", labels={"pool": "apart"})
    try:
        start_controller("replica-a")
        job = trainingjob("apart", min_instance=1, max_instance=8, trainer_cpu="100m")
        own = {"matchLabels": {"edl.dev/job": "apart", "edl.dev/role": "trainer"}}
        job["spec"]["trainer"].update({
            "nodeSelector": {"pool": "apart"},
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": own, "topologyKey": "kubernetes.io/hostname"}]}},
        })
        rest.create(job, namespace)

        def settled() -> list[dict] | None:
            pods = [p for p in rest.list("Pod", namespace, "edl.dev/job=apart,edl.dev/role=trainer")
                    if not p["metadata"].get("deletionTimestamp")]
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return running if len(running) == 4 and len(pods) == 4 else None

        pods = wait_until(settled, 120, "4 trainers running, none Pending")
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)
        wait_tj(rest, namespace, "apart", lambda t: t["status"]["plan"]["target"] == 4,
                timeout=60, label="the target is the 4 that can run")
    finally:
        rest.delete("TrainingJob", "apart", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        for name in nodes:
            rest.delete("Node", name)

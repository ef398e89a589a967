"""A tainted node pool against the real kube-scheduler: a job whose trainers do not
tolerate the taint never counts those nodes as room — it grows onto the untainted nodes
only, none of its trainers waits for room it was promised there, and `status.plan`
says the nodes it may use are full; `edl plan` on a snapshot of the cluster decides the
same."""

from __future__ import annotations

from pathlib import Path

from e2e.control_plane import ControlPlane
from e2e.helpers import parallelism, trainingjob, wait_tj
from e2e.rest import Rest
from e2e.snapshot import edl_plan
from polling import wait_until

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_a_job_without_the_toleration_never_counts_tainted_nodes(
    rest: Rest, plane: ControlPlane, namespace: str, start_controller, tmp_path: Path
) -> None:
    tainted = plane.add_nodes(2, prefix="kwok-tainted")
    try:
        for name in tainted:
            rest.merge("Node", name, {"metadata": {"labels": {"pool": "gpu"}},
                                      "spec": {"taints": [TAINT]}})
        start_controller("replica-a")
        # more trainers than the untainted nodes hold: growth ends where their room ends
        rest.create(trainingjob("plain", min_instance=1, max_instance=40, trainer_cpu="1"),
                    namespace)
        reason = "no node whose taints it tolerates has room"
        tj = wait_tj(rest, namespace, "plain",
                     lambda t: t if reason in t["status"]["plan"]["reason"] else None,
                     timeout=120, label="the plan stops at the untainted nodes' room")

        def settled() -> list[dict] | None:
            pods = [p for p in rest.list("Pod", namespace, "edl.dev/job=plain,edl.dev/role=trainer")
                    if not p["metadata"].get("deletionTimestamp")]
            if len(pods) != parallelism(rest, namespace, "plain"):
                return None
            return pods if all(p["status"].get("phase") == "Running" for p in pods) else None

        pods = wait_until(settled, 90, "every planned trainer running")
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert nodes and not nodes & set(tainted), nodes
        assert len(pods) < 40 and tj["status"]["plan"]["target"] == len(pods)
        # `edl plan` on a snapshot of this cluster counts the same nodes out
        row = edl_plan(rest, tmp_path / "snapshot.json")[(namespace, "plain")]
        assert (row["parallelism"], row["target"]) == (len(pods), len(pods)), row
        assert reason in row["reason"], row
    finally:
        rest.delete("TrainingJob", "plain", namespace)
        wait_until(lambda: not rest.list("Pod", namespace), 120, "the job's pods removed")
        for name in tainted:
            rest.delete("Node", name)

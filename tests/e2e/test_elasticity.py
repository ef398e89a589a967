"""Repeated shrink/grow cycles against the real Job, ReplicaSet and Deployment controllers.

Each cycle the filler Deployment overflows the cluster (the job must give trainers back)
and then disappears (the job must grow again). Every change of the trainer Job's
parallelism must turn into that many Running trainer pods, made by the upstream Job
controller and scheduler, within a few controller ticks: no model plays those parts.
"""

from __future__ import annotations

import time

from e2e.helpers import filler, parallelism, trainer_pods, trainingjob, wait_tj, wait_trainers
from e2e.rest import Rest

CYCLES = 3


def test_repeated_shrink_and_grow_cycles(rest: Rest, namespace: str, start_controller) -> None:
    start_controller("replica-a")
    rest.create(trainingjob("elastic", min_instance=1, max_instance=5, trainer_cpu="1"),
                namespace)
    wait_trainers(rest, namespace, "elastic", 5)
    seen_pods: set[str] = set(trainer_pods(rest, namespace, "elastic"))
    for cycle in range(CYCLES):
        filler(rest, namespace, 40)
        started = time.monotonic()
        wait_trainers(rest, namespace, "elastic", 1, timeout=120)
        shrink = time.monotonic() - started
        filler(rest, namespace, 0)
        started = time.monotonic()
        wait_trainers(rest, namespace, "elastic", 5, timeout=120)
        grow = time.monotonic() - started
        now = set(trainer_pods(rest, namespace, "elastic"))
        assert len(now - seen_pods) >= 4, f"cycle {cycle}: no new trainer pods were created"
        seen_pods |= now
        print(f"cycle {cycle}: shrink {shrink:.1f} s, grow {grow:.1f} s")
    tj = wait_tj(rest, namespace, "elastic",
                 lambda t: t if t["status"]["trainers"]["running"] == 5 else None)
    assert tj["status"]["state"] == "Running"
    assert parallelism(rest, namespace, "elastic") == 5
    # Drained trainers (exit 143, podFailurePolicy Ignore) never count as failures.
    job = rest.get("Job", "elastic-trainer", namespace)
    assert job["status"].get("failed", 0) == 0, job["status"]
    assert not [c for c in job["status"].get("conditions", []) if c["type"] == "Failed"]

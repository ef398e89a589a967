"""Chaos on the real control plane (issue 20): `edl controller` SIGKILLed at a random
moment of each shrink and growth a filler Deployment forces on its job, 22 times.

After every restart (from when the new process holds the Lease) the trainers match
the trainer Job's target within 10 s, and reach the cycle's end state; no
pod of the TrainingJob's earlier incarnation (deleted and re-created under the same
name just before) is ever counted; the Job's `failed`/`succeeded` counters never
decrease; and no controller log shows a status write the API server refused (409 or
422) — the trainer controller's writes are conditional, and a conflict is re-planned
quietly, never logged as a failure.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from e2e.helpers import (
    CONTROLLER_ARGS,
    filler,
    parallelism,
    start_controller_process,
    trainer_pods,
    trainingjob,
    wait_trainers,
)
from e2e.rest import Rest
from e2e.test_trainer_contract import REFUSED_WRITE
from polling import wait_until

KILLS = 22
SETTLE_S = 10.0
LEASE_TAKEN = "acquired lease"  # the leader's own log line (edl.kube.leader)


def live_owner_uids(rest: Rest, namespace: str) -> set[str]:
    pods = rest.list("Pod", namespace, "edl.dev/job=chaos,edl.dev/role=trainer")
    return {ref["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") in ("Pending", "Running")
            for ref in p["metadata"].get("ownerReferences") or ()}


@pytest.mark.timeout(1500)
def test_sigkilled_controller_during_grow_and_shrink_cycles(
        rest: Rest, namespace: str, start_controller, controller_kubeconfig: Path,
        tmp_path: Path) -> None:
    rng = random.Random(20)
    controller = start_controller("replica-a")
    # an earlier incarnation under the same name, whose pods may still be terminating
    rest.create(trainingjob("chaos", min_instance=2, max_instance=8), namespace)
    wait_trainers(rest, namespace, "chaos", 8, timeout=120)
    old_uid = rest.get("Job", "chaos-trainer", namespace)["metadata"]["uid"]
    rest.delete("TrainingJob", "chaos", namespace)
    rest.create(trainingjob("chaos", min_instance=2, max_instance=8), namespace)
    wait_until(lambda: (rest.find("Job", "chaos-trainer", namespace) or {"metadata": {}})
               ["metadata"].get("uid") not in (None, old_uid), 60, "the new trainer Job")
    wait_trainers(rest, namespace, "chaos", 8, timeout=120)
    uid = rest.get("Job", "chaos-trainer", namespace)["metadata"]["uid"]

    controllers = [controller]
    counters = {"failed": 0, "succeeded": 0}
    settle_times = []
    full = False
    try:
        for kill in range(KILLS):
            full = not full  # the filler overflows the cluster (a shrink) or leaves (a growth)
            filler(rest, namespace, 40 if full else 0)
            target = 2 if full else 8
            time.sleep(rng.uniform(0.0, 3.0))  # a random moment of that shrink or growth
            controllers[-1].stop(signal.SIGKILL)
            # the same identity takes its own Lease back at once; a log per incarnation
            controllers.append(start_controller_process(
                controller_kubeconfig, tmp_path / f"controller-{kill}.log", "replica-a",
                *CONTROLLER_ARGS))
            # from when the new process leads: a Python start on a loaded machine is not
            # edl's recovery time
            wait_until(lambda: LEASE_TAKEN in controllers[-1].text(), 120,
                       f"kill {kill}: the restarted controller holds the Lease")
            restarted = time.monotonic()

            def at_target() -> bool:  # the trainers match the trainer Job's target
                want = parallelism(rest, namespace, "chaos")
                return want is not None and len(trainer_pods(rest, namespace, "chaos")) == want

            wait_until(at_target, SETTLE_S, f"kill {kill}: trainers at the target within "
                       f"{SETTLE_S} s of the restart")
            settle_times.append(time.monotonic() - restarted)
            # the Autoscaler's cycle completes (its pace, not the restart's)
            wait_trainers(rest, namespace, "chaos", target, timeout=120)
            job = rest.get("Job", "chaos-trainer", namespace)
            assert job["metadata"]["uid"] == uid
            status = job.get("status") or {}
            for name in counters:  # never decreasing
                assert int(status.get(name) or 0) >= counters[name], (name, status)
                counters[name] = int(status.get(name) or 0)
            assert live_owner_uids(rest, namespace) <= {uid}  # only this incarnation
            assert int(status.get("active") or 0) <= 8
    finally:
        for started in controllers[1:]:
            started.stop()
    forbidden = [line for c in controllers[1:] for line in c.forbidden_lines()]
    assert not forbidden, "\n".join(forbidden[:10])
    refused = [line for c in controllers for line in c.text().splitlines()
               if REFUSED_WRITE.search(line) and ("status" in line or "Job" in line)]
    assert not refused, "\n".join(refused[:10])
    assert len(settle_times) == KILLS
    print(f"settle after restart: max {max(settle_times):.1f} s, "
          f"mean {sum(settle_times) / KILLS:.1f} s over {KILLS} kills")

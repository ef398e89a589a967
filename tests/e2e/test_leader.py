"""Two `edl controller` replicas against the real API server: one holds the Lease.

The Lease is the upstream coordination.k8s.io/v1 object, guarded by the real API
server's resourceVersion preconditions; the replicas' rights on it are exactly
deploy/rbac.yaml's Role (create, and get/patch of the one named edl-controller).
The replicas run with edl controller's production Lease timing (15 s, renew deadline
10 s, retry 2 s): this is the test that keeps it (it used 6 s before the suite ran side
by side, when a loaded machine could starve a renewal past a 4 s deadline).
"""

from __future__ import annotations

import datetime as dt
import signal
import time

from e2e.helpers import SYSTEM_NAMESPACE, filler, parallelism, trainingjob, wait_trainers
from e2e.rest import Rest
from polling import wait_until

LEASE_DURATION = 15.0  # edl controller's default, which helpers.CONTROLLER_ARGS keeps


def lease(rest: Rest) -> dict:
    return (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {}).get("spec", {})


def micro(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def test_standby_takes_over_within_the_lease_duration_after_sigkill(
        rest: Rest, namespace: str, start_controller) -> None:
    first = start_controller("replica-a")
    wait_until(lambda: lease(rest).get("holderIdentity") == "replica-a", 60, "a leads")
    second = start_controller("replica-b")
    rest.create(trainingjob("one", min_instance=1, max_instance=3), namespace)
    wait_trainers(rest, namespace, "one", 3)
    assert lease(rest)["holderIdentity"] == "replica-a", "the standby took a live leader's Lease"
    transitions = lease(rest).get("leaseTransitions", 0)

    last_renew = micro(lease(rest)["renewTime"])
    first.stop(signal.SIGKILL)  # no release: the Lease has to expire
    killed_at = dt.datetime.now(dt.UTC)
    spec = wait_until(lambda: lease(rest) if lease(rest).get("holderIdentity") == "replica-b"
                      else None, 60, "b takes over")
    taken = micro(spec["acquireTime"])
    assert spec["leaseTransitions"] == transitions + 1
    # Expiry is judged on b's clock from the last renewal it saw: lease duration plus at
    # most one retry period and scheduling noise on a loaded machine.
    assert taken - last_renew <= dt.timedelta(seconds=LEASE_DURATION + 6), (last_renew, taken)
    assert taken >= killed_at - dt.timedelta(seconds=1)

    # The new leader serves: a new job gets children and scales.
    rest.create(trainingjob("two", min_instance=1, max_instance=2), namespace)
    wait_trainers(rest, namespace, "two", 2)
    assert second.proc.poll() is None


def test_a_frozen_leader_writes_nothing_after_the_takeover(
        rest: Rest, namespace: str, start_controller) -> None:
    """SIGSTOP the leader past its Lease, let the standby act, then SIGCONT it: the old
    leader's caches are stale and its timers all due at once, yet none of its writes may
    land; it must notice the lost Lease and exit."""
    first = start_controller("replica-a")
    wait_until(lambda: lease(rest).get("holderIdentity") == "replica-a", 60, "a leads")
    second = start_controller("replica-b")
    rest.create(trainingjob("frozen", min_instance=1, max_instance=4, trainer_cpu="1"),
                namespace)
    wait_trainers(rest, namespace, "frozen", 4)

    first.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: lease(rest).get("holderIdentity") == "replica-b", 60, "b takes over")
        taken = micro(lease(rest)["acquireTime"])
        # b sees the cluster fill up and shrinks the job; a, frozen, saw it with room.
        filler(rest, namespace, 40, cpu="1")
        wait_trainers(rest, namespace, "frozen", 1, timeout=120)
    finally:
        first.proc.send_signal(signal.SIGCONT)
    assert first.proc.wait(60) == 1, first.text()[-3000:]
    assert "lost lease" in first.text() or "exiting" in first.text(), first.text()[-3000:]
    time.sleep(3)  # anything a wrote in its last moments has landed by now
    assert parallelism(rest, namespace, "frozen") == 1
    late = [e for e in rest.list("Event", namespace)
            if e.get("reportingInstance") == "replica-a"
            and micro(e["metadata"]["creationTimestamp"]) >= taken]
    assert not late, [e["message"] for e in late]
    assert lease(rest)["holderIdentity"] == "replica-b"
    assert second.proc.poll() is None

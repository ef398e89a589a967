"""TrainingJob status and scale Events as the Kubernetes controller writes them."""

from __future__ import annotations

import sys
from pathlib import Path

from edl.accounting import ClusterResource
from edl.kube.events import describe_load, scale_event
from edl.kube.status import kube_status, status_patch

EDL = str(Path(sys.executable).with_name("edl"))


def test_status_survives_a_stored_status_of_any_shape() -> None:
    mine = {"state": "Running", "message": "ok", "trainers": {"desired": 2, "running": 2}}
    for previous in ({"conditions": "odd"}, {"conditions": ["x", None]}, "odd", None):
        full = kube_status(mine, previous, 3, now="2026-01-01T00:00:00Z")  # type: ignore[arg-type]
        conditions = {c["type"]: c["status"] for c in full["conditions"]}
        assert conditions == {"Ready": "True", "Scaling": "False", "Complete": "False",
                              "Failed": "False", "Suspended": "False"}


def test_status_conditions_keep_their_transition_time() -> None:
    first = kube_status({"state": "Created", "message": "waiting",
                         "trainers": {"desired": 3, "running": 0, "pending": 3}},
                        None, generation=1, now="2026-01-01T00:00:00Z")
    assert first["replicas"] == 3 and first["observedGeneration"] == 1
    conditions = {c["type"]: c for c in first["conditions"]}
    assert (conditions["Scaling"]["status"], conditions["Scaling"]["reason"]) == ("True",
                                                                                  "ScalingUp")
    second = kube_status({"state": "Running", "message": "3 of 3 running",
                          "trainers": {"desired": 3, "running": 3, "pending": 0}},
                         first, generation=1, now="2026-01-01T00:01:00Z")
    by_type = {c["type"]: c for c in second["conditions"]}
    assert by_type["Ready"]["status"] == "True"
    assert by_type["Ready"]["lastTransitionTime"] == "2026-01-01T00:01:00Z"  # changed
    assert by_type["Failed"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # unchanged
    assert by_type["Scaling"]["reason"] == "Stable"


def test_complete_and_suspended_conditions_follow_the_state() -> None:
    """`kubectl wait --for=condition=Complete` (or Failed) needs these; each keeps its
    lastTransitionTime until its status changes."""
    def by_type(status: dict) -> dict[str, tuple[str, str, str]]:
        return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"])
                for c in status["conditions"]}

    held = kube_status({"state": "Created",
                        "message": "trainer Job suspended (waiting for admission)"},
                       None, 1, now="2026-01-01T00:00:00Z")
    assert by_type(held)["Suspended"] == ("True", "TrainerJobSuspended", "2026-01-01T00:00:00Z")
    running = kube_status({"state": "Running", "message": "2 of 2 trainers running",
                           "trainers": {"desired": 2, "running": 2}}, held, 1,
                          now="2026-01-01T00:01:00Z")
    assert by_type(running)["Suspended"] == ("False", "NotSuspended", "2026-01-01T00:01:00Z")
    assert by_type(running)["Complete"] == ("False", "NotFinished", "2026-01-01T00:00:00Z")
    done = kube_status({"state": "Succeeded", "message": "trainers finished"}, running, 1,
                       now="2026-01-01T00:02:00Z")
    conditions = by_type(done)
    assert conditions["Complete"] == ("True", "TrainersFinished", "2026-01-01T00:02:00Z")
    assert conditions["Failed"][0] == "False" and conditions["Suspended"][0] == "False"
    assert conditions["Suspended"][2] == "2026-01-01T00:01:00Z"  # unchanged status, same time
    again = kube_status({"state": "Succeeded", "message": "trainers finished"}, done, 1,
                        now="2026-01-01T00:09:00Z")
    assert again["conditions"] == done["conditions"]  # nothing to write while nothing changes
    failed = kube_status({"state": "Failed", "message": "the trainer Job failed: "
                          "BackoffLimitExceeded"}, None, 1)
    assert by_type(failed)["Complete"][0] == "False"
    assert by_type(failed)["Failed"][:2] == ("True", "TrainerJobFailed")


def test_failed_status_and_its_patch_clear_stale_counts() -> None:
    failed = kube_status({"state": "Failed", "message": "spec.port: must be <= 65535"},
                         None, generation=2)
    assert {c["type"]: c["reason"] for c in failed["conditions"]}["Failed"] == "InvalidSpec"
    patch = status_patch(failed)["status"]
    assert patch["trainers"] is None and patch["replicas"] is None  # removed by merge patch
    assert patch["state"] == "Failed"


def test_scale_event_explains_the_decision() -> None:
    resources = ClusterResource(cpu_request_milli=3000, cpu_total_milli=4000,
                                memory_request_mega=1000, memory_total_mega=8000)
    event = scale_event("ns", "job", "uid-1", before=4, after=2, reason="make room",
                        resources=resources, max_load_desired=0.9)
    assert event["reason"] == "ScalingDown"
    assert event["message"] == ("target trainers 4 -> 2: make room; cluster load cpu 0.75, "
                                "memory 0.12 vs max_load_desired 0.90")
    assert event["involvedObject"] == {"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
                                       "namespace": "ns", "name": "job", "uid": "uid-1"}
    assert describe_load(None, 0.97).startswith("cluster load unknown")


def test_a_load_over_one_is_explained() -> None:
    over = ClusterResource(cpu_request_milli=5400, cpu_total_milli=4000,
                           memory_request_mega=1000, memory_total_mega=8000)
    assert describe_load(over, 0.97) == (
        "cluster load cpu 1.35, memory 0.12 vs max_load_desired 0.97 (load = requested / "
        "allocatable, pending pods included; cpu over 1: pods ask for more than the nodes "
        "have, the rest waits Pending)")

"""`waiting_reason`: what a job's missing trainers wait for (the WAITING column)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.cluster.port import JobPods
from edl.control.job_status import waiting_reason
from edl.kube.status import kube_status


def pods(running: int, pending: int, unscheduled: int | None) -> JobPods:
    return JobPods(total=running + pending, running=running, pending=pending,
                   unscheduled=unscheduled)


def test_each_cause_is_named_with_its_count() -> None:
    assert waiting_reason(4, pods(1, 2, 1)) == (
        "1 trainer unscheduled (no node fits yet); 1 trainer starting; "
        "1 trainer not created yet")
    assert waiting_reason(4, pods(0, 0, 0)) == "4 trainers not created yet"
    assert waiting_reason(3, pods(1, 1, None)) == "1 trainer pending; 1 trainer not created yet"
    assert waiting_reason(2, pods(2, 0, 0)) == ""


@given(desired=st.integers(0, 50), running=st.integers(0, 50), pending=st.integers(0, 50),
       data=st.data())
def test_empty_exactly_when_nothing_is_missing(desired: int, running: int, pending: int,
                                               data: st.DataObject) -> None:
    unscheduled = data.draw(st.none() | st.integers(0, pending))
    text = waiting_reason(desired, pods(running, pending, unscheduled))
    assert (text == "") is (running >= desired)
    if text:  # every number in it is a count of trainers, none of them zero
        counts = [int(word) for word in text.replace(";", " ").split() if word.isdigit()]
        assert counts and all(c > 0 for c in counts)


def test_kube_status_carries_waiting_except_when_failed() -> None:
    mine = {"state": "Created", "message": "waiting for trainers: 2 pending",
            "waiting": "2 trainers unscheduled (no node fits yet)",
            "trainers": {"desired": 2, "running": 0, "pending": 2}}
    assert kube_status(mine, None, 1)["waiting"] == mine["waiting"]
    failed = {**mine, "state": "Failed", "message": "the trainer Job failed: x"}
    assert "waiting" not in kube_status(failed, None, 1)
    retrying = {"state": "Created", "message": "creating children, retrying: 503"}
    assert "retrying" in kube_status(retrying, None, 1)["waiting"]

"""Quota as admission sees it (issue 29, item 7): `status.hard` binds, and a quota the
quota controller has not synced yet is unknown (no growth), never unlimited."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.accounting.quota import QuotaPod, quota_room, trainers_allowed
from edl.accounting.types import PodResources

POD = PodResources(cpu_request_milli=1000, memory_request_mega=100)
TRAITS = QuotaPod()


def quota(spec: dict, status: dict | None) -> dict:
    body = {"metadata": {"name": "q", "namespace": "team"}, "spec": {"hard": spec}}
    if status is not None:
        body["status"] = status
    return body


def allowed(obj: dict) -> int | None:
    return trainers_allowed([quota_room(obj)], "team", POD, TRAITS)[0]


def test_a_raised_quota_binds_with_its_old_status_hard_until_synced():
    raised = quota({"requests.cpu": "8"}, {"hard": {"requests.cpu": "4"},
                                           "used": {"requests.cpu": "2"}})
    assert allowed(raised) == 2  # admission still enforces 4 CPUs, not 8


def test_a_new_quota_not_synced_yet_admits_no_growth():
    assert allowed(quota({"requests.cpu": "8"}, None)) == 0
    assert allowed(quota({"requests.cpu": "8"}, {})) == 0


def test_a_status_without_used_for_a_hard_resource_is_unknown():
    partial = quota({"requests.cpu": "8", "pods": "10"},
                    {"hard": {"requests.cpu": "8", "pods": "10"}, "used": {"pods": "1"}})
    assert allowed(partial) == 0  # admission: "status unknown for quota"


def test_the_in_process_model_reads_spec_hard():
    room = quota_room(quota({"requests.cpu": "8"}, None), from_spec=True)
    assert room.hard == {"requests.cpu": 8000} and room.used == {}


@given(spec=st.integers(0, 64), status=st.integers(0, 64), used=st.integers(0, 64),
       synced=st.booleans())
def test_never_more_than_admission_would_admit(spec, status, used, synced):
    obj = quota({"requests.cpu": str(spec)},
                {"hard": {"requests.cpu": str(status)}, "used": {"requests.cpu": str(used)}}
                if synced else None)
    admitted = max(status - used, 0) if synced else 0  # unsynced: edl plans no growth
    assert allowed(obj) == admitted

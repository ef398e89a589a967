"""The pure controller rules (`edl.cluster.inproc.workloads`) on plain data."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.cluster.inproc.pods import OwnerPods
from edl.cluster.inproc.workloads import crash_backoff_s, pod_name, wanted_pods


def owner(running=0, succeeded=0, failed=0, condition=None):
    return OwnerPods(running=running, succeeded=succeeded, failed=failed, condition=condition)


@pytest.mark.parametrize(
    ("kind", "spec", "pods", "expected"),
    [
        ("ReplicaSet", {"replicas": 3}, owner(running=5), (3, None)),
        ("Deployment", {}, owner(), (1, None)),
        ("Job", {"parallelism": 4}, owner(running=2), (4, None)),
        # work queue (no completions): after one success, create none, finish the rest
        ("Job", {"parallelism": 4}, owner(running=2, succeeded=1), (2, None)),
        ("Job", {"parallelism": 1}, owner(running=2, succeeded=1), (1, None)),
        ("Job", {"parallelism": 4}, owner(succeeded=1), (0, "Complete")),
        # fixed completions: at most what is still missing
        ("Job", {"parallelism": 4, "completions": 5}, owner(succeeded=3), (2, None)),
        ("Job", {"parallelism": 4, "completions": 5}, owner(succeeded=5), (0, "Complete")),
        # backoffLimit
        ("Job", {"parallelism": 2, "backoffLimit": 1}, owner(failed=2), (0, "Failed")),
        ("Job", {"parallelism": 2, "backoffLimit": 1}, owner(failed=1), (2, None)),
        ("Job", {"parallelism": 2}, owner(condition="Failed"), (0, "Failed")),
    ],
)
def test_wanted_pods(kind, spec, pods, expected):
    assert wanted_pods(kind, spec, pods) == expected


@given(st.integers(1, 40))
def test_crash_backoff_doubles_from_ten_seconds_up_to_five_minutes(streak):
    delay = crash_backoff_s(streak)
    assert 10.0 <= delay <= 300.0
    assert delay == min(10.0 * 2 ** (streak - 1), 300.0)


@given(st.integers(0, 36**5 - 1))
def test_pod_names_are_unique_and_sortable_by_creation(index):
    name = pod_name("web", index)
    assert len(name) == len("web-") + 5
    if index:
        assert pod_name("web", index - 1) < name

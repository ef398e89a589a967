"""Only room a new pod could be scheduled on counts: cordoned and NotReady nodes
offer none. Tainted nodes keep their room: which pods may use it is decided per pod
(tests/accounting/test_eligibility.py, tests/policy/test_constraints.py)."""

from __future__ import annotations

import pytest

from edl.accounting import ResourceLedger
from edl.accounting.ledger import node_schedulable


def node(name, cpu="8", **extra):
    spec = extra.pop("spec", {})
    status = {"allocatable": {"cpu": cpu, "memory": "16Gi"}, **extra}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def pod(name, node_name, cpu="2"):
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}}


READY = [{"type": "Ready", "status": "True"}]


@pytest.mark.parametrize(("obj", "schedulable"), [
    (node("plain"), True),
    (node("ready", conditions=READY), True),
    (node("cordoned", spec={"unschedulable": True}), False),
    (node("not-ready", conditions=[{"type": "Ready", "status": "False"}]), False),
    (node("unknown", conditions=[{"type": "Ready", "status": "Unknown"}]), False),
    (node("tainted", spec={"taints": [{"key": "gpu", "effect": "NoSchedule"}]}), True),
    (node("evicting", spec={"taints": [{"key": "x", "effect": "NoExecute"}]}), True),
    (node("preferred", spec={"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}), True),
])
def test_which_nodes_offer_room(obj, schedulable):
    assert node_schedulable(obj) is schedulable


def test_a_closed_node_offers_no_room_and_counts_as_full():
    ledger = ResourceLedger()
    ledger.set_node_object(node("open"))
    ledger.set_node_object(node("cordoned", spec={"unschedulable": True}))
    ledger.set_pod(pod("a", "open"))
    ledger.set_pod(pod("b", "cordoned", cpu="3"))
    snapshot = ledger.snapshot()
    assert set(snapshot.nodes.cpu_idle_milli) == {"open"}
    assert snapshot.nodes.cpu_idle_milli["open"] == 6000
    assert snapshot.cpu_total_milli == 8000 + 3000  # the cordoned node as if full
    assert snapshot.cpu_request_milli == 5000
    # uncordoned: its room is back
    ledger.set_node_object(node("cordoned"))
    snapshot = ledger.snapshot()
    assert snapshot.nodes.cpu_idle_milli["cordoned"] == 5000
    assert snapshot.cpu_total_milli == 16000


def test_a_tainted_node_keeps_its_room_and_its_taints():
    ledger = ResourceLedger()
    ledger.set_node_object(node("gpu", spec={"taints": [{"key": "gpu", "effect": "NoSchedule"}]}))
    snapshot = ledger.snapshot()
    assert snapshot.nodes.cpu_idle_milli == {"gpu": 8000}
    assert [t.key for t in snapshot.nodes.facts["gpu"].taints] == ["gpu"]

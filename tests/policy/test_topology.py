"""A job's own topology rules in the plan: required pod anti-affinity, DoNotSchedule
spread and required pod affinity among its trainers (`policy/topology.py`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.policy.test_constraints import node, plan, pod, trainer_pods, trainer_spec

from edl.accounting import pod_request
from edl.accounting.eligibility import constraints_of, topology_problems
from edl.policy import JobView, Trainer

LABELS = {"edl.dev/job": "job", "edl.dev/role": "trainer"}
SELF = {"matchLabels": dict(LABELS)}
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def apart(key: str = HOST) -> dict:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": SELF, "topologyKey": key}]}}


def job(spec: dict, lo: int, hi: int, placed=(), parallelism=None) -> JobView:
    trainers = tuple(Trainer(f"job-{i}", n) for i, n in enumerate(placed))
    count = len(placed) if parallelism is None else parallelism
    return JobView.from_pod_resources(
        "default", "job", min_instance=lo, max_instance=hi, parallelism=count,
        per_pod=pod_request({"spec": spec}), total=max(count, len(placed)),
        running=len(placed), pending=max(0, count - len(placed)),
        unscheduled=max(0, count - len(placed)), trainers=trainers,
        constraints=constraints_of(spec, LABELS))


def test_anti_affinity_on_hostname_lets_one_trainer_per_node():
    """4 nodes, max 8, required anti-affinity against its own trainers: the target is
    the 4 that can run, one per node, never 8 with 4 Pending for ever."""
    spec = {**trainer_spec(), "affinity": apart()}
    nodes = [node(f"n{i}") for i in range(4)]
    grown = plan(nodes, [], [job(spec, 1, 8, placed=["n0"])])["job"]
    assert grown.target == 4 and sorted(grown.placement) == ["n1", "n2", "n3"]
    stuck = job(spec, 1, 8, placed=["n0", "n1", "n2", "n3"], parallelism=8)
    pods = [pod(f"job-{i}", f"n{i}") for i in range(4)]
    decision = plan(nodes, pods, [stuck])["job"]
    assert decision.target == 4 and "follows what can land" in decision.reason


def test_anti_affinity_on_zone_lets_one_trainer_per_zone():
    spec = {**trainer_spec(), "affinity": apart(ZONE)}
    nodes = [node(f"n{i}", labels={ZONE: "a" if i < 2 else "b"}) for i in range(4)]
    decision = plan(nodes, [], [job(spec, 1, 8, placed=["n0"])])["job"]
    assert decision.target == 2 and decision.placement in (("n2",), ("n3",))


def test_spread_do_not_schedule_caps_each_node_at_the_emptiest_plus_skew():
    """maxSkew 1 on hostname; n2 is full of another tenant's pods, so it holds none of
    the job's trainers and the others may hold one each: the target stops at 2."""
    spread = [{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": SELF}]
    spec = {**trainer_spec(), "topologySpreadConstraints": spread}
    nodes = [node("n0"), node("n1"), node("n2")]
    others = [pod(f"x{i}", "n2", cpu="2") for i in range(4)]
    decision = plan(nodes, others, [job(spec, 1, 8)])["job"]
    assert decision.target == 2 and sorted(decision.placement) == ["n0", "n1"]


def test_pod_affinity_on_zone_keeps_trainers_in_the_first_ones_zone():
    spec = {**trainer_spec(cpu="4"), "affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": SELF, "topologyKey": ZONE}]}}}
    nodes = [node(f"n{i}", labels={ZONE: "a" if i < 2 else "b"}) for i in range(4)]
    view = job(spec, 1, 8, placed=["n2"])
    decision = plan(nodes, trainer_pods(view, spec), [view])["job"]
    assert decision.target == 4 and set(decision.placement) <= {"n2", "n3"}


def test_rules_the_planner_cannot_model_are_named():
    other = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}]}}
    problems = topology_problems({"affinity": other}, LABELS)
    assert len(problems) == 1 and "must select the pods themselves" in problems[0][1]
    rack = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": SELF, "topologyKey": "example.com/rack"}]}}
    assert "topologyKey 'example.com/rack'" in topology_problems({"affinity": rack}, LABELS)[0][1]
    anyway = [{"maxSkew": 1, "topologyKey": "example.com/rack",
               "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": SELF}]
    assert topology_problems({"topologySpreadConstraints": anyway}, LABELS) == []
    assert topology_problems({"affinity": apart()}, LABELS) == []


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(0, 3))
def test_anti_affinity_never_plans_two_trainers_on_one_node(nodes, most, placed):
    spec = {**trainer_spec(), "affinity": apart()}
    names = [f"n{i}" for i in range(nodes)]
    on = names[:min(placed, nodes)]
    view = job(spec, 1, max(most, len(on)), placed=on)
    decision = plan([node(n) for n in names], trainer_pods(view, spec), [view])["job"]
    used = list(on) + list(decision.placement)
    assert len(used) == len(set(used))
    assert decision.target == min(max(most, len(on)), nodes)


def test_validation_refuses_trainer_rules_the_planner_cannot_model():
    from tests.jobparser.test_pod_fields import job as job_manifest
    from tests.jobparser.test_pod_fields import problems

    other = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}]}}
    found = problems(job_manifest(trainer={"affinity": other}))
    path = "spec.trainer.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
    assert "the autoscaler cannot plan for this rule" in found[path]
    own = {"matchLabels": {"edl.dev/job": "mnist", "edl.dev/role": "trainer"}}
    ok = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": own, "topologyKey": HOST}]}}
    from edl.jobparser import JobParser

    JobParser().validate(job_manifest(trainer={"affinity": ok}))  # its own trainers: planned

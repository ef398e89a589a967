"""Which node groups (pools) each job of a scenario can use, for constraint metrics.

`jobs_below_min_s` counts a job below its min only while a job that can use some of
the same nodes runs above its own min (room that could have been its); utilisation
per pool shows where room went unused. A job may use a node group when its trainers'
constraints admit the group's labels and taints (`accounting.eligibility`, as the
planner reads them) and one trainer fits a node of it beside the per-node background
pods.
"""

from __future__ import annotations

from edl.accounting.eligibility import NodeFacts, Taint, constraints_of
from edl.api.quantity import cpu_milli, memory_mega
from edl.sim.scenario import JobPlan, Scenario, expand_jobs
from edl.sim.sections import Resources

__all__ = ["job_mins", "job_overlaps", "node_pools", "pool_allocatable"]


def _amounts(resources: Resources) -> tuple[int, int, int]:
    return (
        cpu_milli(str(resources.cpu)) if resources.cpu is not None else 0,
        memory_mega(str(resources.memory)) if resources.memory is not None else 0,
        resources.gpu,
    )


def node_pools(scenario: Scenario) -> dict[str, str]:
    """Node name -> its node group's name (the runner names nodes `<group>-<index>`)."""
    return {f"{g.name}-{i}": g.name for g in scenario.cluster.node_groups for i in range(g.count)}


def pool_allocatable(scenario: Scenario) -> dict[str, int]:
    """Per node group: allocatable CPU (milli) of all its nodes."""
    return {g.name: g.count * _amounts(g.allocatable)[0] for g in scenario.cluster.node_groups}


def _usable_groups(scenario: Scenario, plan: JobPlan) -> frozenset[str]:
    group = plan.group
    assert group.trainer is not None
    fields = group.scheduling.pod_fields() if group.scheduling is not None else {}
    constraints = constraints_of(fields)
    want = _amounts(group.trainer.resources.requests)
    background = [0, 0, 0]
    for pods in scenario.cluster.background_pods:
        if pods.per_node:
            for d, amount in enumerate(_amounts(pods.resources.requests)):
                background[d] += amount
    usable = set()
    for node_group in scenario.cluster.node_groups:
        facts = NodeFacts(
            f"{node_group.name}-0",
            tuple(sorted(node_group.labels.items())),
            tuple(Taint(t.key, t.value, t.effect) for t in node_group.taints),
        )
        room = _amounts(node_group.allocatable)
        fits = all(want[d] <= room[d] - background[d] for d in range(3))
        if fits and not constraints.blocker(facts):
            usable.add(node_group.name)
    return frozenset(usable)


def job_mins(scenario: Scenario) -> dict[str, int]:
    """Each compact job's min-instance, by job name."""
    return {p.name: p.group.trainer.min for p in expand_jobs(scenario)
            if p.group.trainer is not None}


def job_overlaps(scenario: Scenario) -> dict[str, frozenset[str]]:
    """Per compact job: the other jobs that can use some node group it can use."""
    groups = {p.name: _usable_groups(scenario, p) for p in expand_jobs(scenario)
              if p.group.trainer is not None}
    return {
        name: frozenset(other for other, theirs in groups.items()
                        if other != name and mine & theirs)
        for name, mine in groups.items()
    }

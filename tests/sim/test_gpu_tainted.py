"""The shipped `gpu-tainted` scenario on the in-process model: a tainted GPU pool, node
selectors, services preempting trainers by PriorityClass, a namespace quota."""

from __future__ import annotations

import pytest

from edl.cluster.inproc.controllers import TRAINING_JOB
from edl.cluster.inproc.pods import PodRecord
from edl.sim.runner import _Run
from edl.sim.scenario import load_scenario


@pytest.fixture(scope="module")
def run_record():
    scenario = load_scenario("gpu-tainted")
    run = _Run(scenario, "default", scenario.seed)
    bound: list[tuple[str, str, str, str]] = []  # (namespace, job or workload, role, node)
    preempted: list[str] = []
    research_live: list[int] = []
    live: dict[str, set[str]] = {}

    def listen(event: str, pod: PodRecord) -> None:
        name = pod.job or pod.name.rsplit("-", 2)[0]
        if event == "bound":
            bound.append((pod.namespace, name, pod.role, pod.node or ""))
        if event == "created":
            live.setdefault(pod.namespace, set()).add(pod.uid)
            if pod.namespace == "research":
                research_live.append(len(live["research"]))
        if event == "exited":
            live.get(pod.namespace, set()).discard(pod.uid)
        if event == "deleting" and any(
                c.get("reason") == "PreemptionByScheduler"
                for c in pod.manifest["status"].get("conditions") or ()):
            preempted.append(pod.role)

    run.cluster.watch_pods(listen)
    plans: list[tuple[float, str, str]] = []  # (time, job, status.plan.reason)

    def probe(when: float) -> None:
        for name in ("research-1", "research-2"):
            status = (run.cluster.store.peek(TRAINING_JOB, "research", name) or {}).get("status")
            if status and status.get("plan"):
                plans.append((when, name, status["plan"]["reason"]))

    for when in range(100, 900, 50):
        run.clock.call_at(when, probe, when)
    try:
        timeline = run.clock.run(run.main(None))
        jobs = {
            (ns, name): job for (kind, ns, name), job in
            ((key, run.cluster.store.peek(*key)) for key in list(run.cluster._owners))
            if kind == "Job" and job is not None
        }
    finally:
        run.clock.close()
    return bound, preempted, research_live, timeline, jobs, plans


def test_cpu_trainers_never_land_on_the_tainted_gpu_pool(run_record):
    bound = run_record[0]
    cpu = [node for ns, job, role, node in bound if role == "trainer" and job.startswith("cpu-")]
    assert cpu and not any(node.startswith("gpu-") for node in cpu)


def test_gpu_trainers_and_inference_land_only_on_the_selected_pool(run_record):
    bound = run_record[0]
    gpu = [node for ns, job, role, node in bound if role == "trainer" and job.startswith("gpu-")]
    assert gpu and all(node.startswith("gpu-") for node in gpu)
    inference = [node for ns, job, role, node in bound if job.startswith("inference")]
    assert inference and all(node.startswith("gpu-") for node in inference)


def test_services_preempt_trainers_and_that_is_a_shrink_not_a_crash(run_record):
    _, preempted, _, timeline, jobs, _ = run_record
    assert "trainer" in preempted
    for (_namespace, name), job in jobs.items():
        if name.endswith("-trainer"):
            assert int((job.get("status") or {}).get("failed") or 0) == 0, name
    assert all(timeline.workloads[w] for w in ("web", "inference"))


def test_the_research_jobs_grow_to_their_quota_and_never_past_it(run_record):
    research_live = run_record[2]
    # 2 jobs of up to 40 trainers: the quota (20 CPUs, 20 pods), not max-instance, binds
    assert research_live and 8 <= max(research_live) <= 20


def test_the_quota_is_the_reason_in_the_jobs_status(run_record):
    plans = run_record[5]
    quota = [r for _, _, r in plans if "namespace quota research/research-cap" in r]
    assert len(quota) >= len(plans) // 2, plans  # most of the run, the quota binds them

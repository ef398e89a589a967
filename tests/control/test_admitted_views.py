"""A job's view from its admitted trainer pod; a job admission makes unplannable is not
grown, and its decision says why first."""

from __future__ import annotations

from edl.accounting.admitted import AdmittedTrainer, refused_trainer
from edl.accounting.types import PodResources
from edl.control.admitted_views import explained, with_admission
from edl.policy import Decision, JobView


def _view(parallelism: int = 3) -> JobView:
    return JobView.from_pod_resources(
        "ns", "j", min_instance=2, max_instance=8, parallelism=parallelism,
        per_pod=PodResources(cpu_request_milli=250), total=parallelism,
        running=parallelism, pending=0, unscheduled=0, priority_class="from-template")


def test_the_admitted_requests_and_class_replace_the_templates() -> None:
    pod = PodResources(cpu_request_milli=2000, memory_request_mega=512,
                       extended=(("example.com/widget", 2),))
    view = with_admission(_view(), AdmittedTrainer(per_pod=pod, priority_class="elastic"))
    assert (view.cpu_request_milli, view.memory_request_mega, view.extended) == (
        2000, 512, (("example.com/widget", 2),))
    assert view.priority_class == "elastic" and view.max_instance == 8
    assert with_admission(_view(), None) == _view()


def test_a_refused_trainer_holds_the_job_at_its_size_never_below_min() -> None:
    refused = refused_trainer("no PriorityClass with name late was found")
    assert with_admission(_view(3), refused).max_instance == 3
    assert with_admission(_view(0), refused).max_instance == 2  # its min still planned
    assert with_admission(_view(3), refused).cpu_request_milli == 250  # the template's
    decisions = [Decision("ns", "j", 3, 3, "keep 3: at max-instance | fair share 4"),
                 Decision("ns", "k", 1, 4, "grow 1->4: at max-instance"),
                 Decision("ns", "m", 3, 2, "shrink 3->2: make room for 1 pending pod")]
    problems = {("ns", "j"): refused.problem, ("ns", "m"): refused.problem}
    out = explained(decisions, problems)
    assert out[0].reason == ("keep 3: the API server refuses trainer pods: no PriorityClass "
                             "with name late was found | at max-instance | fair share 4")
    assert out[1:] == decisions[1:]  # not held; and a shrink keeps its own reason

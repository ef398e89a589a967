"""The dry-run's admitted trainer pod, read into what the planner plans from."""

from __future__ import annotations

import copy
from typing import Any

from edl.accounting.admitted import admitted_trainer, refused_trainer, template_hash
from edl.accounting.eligibility import Toleration

LABELS = {"edl.dev/job": "j", "edl.dev/role": "trainer"}


def _template(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": dict(LABELS)}, "spec": {
        "containers": [{"name": "trainer", "image": "img",
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}],
        **spec}}


def _admitted(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    pod = copy.deepcopy(template)
    pod["metadata"]["name"] = "j-trainer-abcde"
    pod["spec"].update(spec)
    return pod


def test_the_limit_range_default_and_added_tolerations_are_what_is_planned() -> None:
    template = _template()
    pod = _admitted(template, priorityClassName="elastic", priority=-10, tolerations=[
        {"key": "example.com/widget", "operator": "Exists", "effect": "NoSchedule"}])
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "250m", "memory": "256Mi", "example.com/widget": "2"},
        "limits": {"example.com/widget": "2"}}
    seen = admitted_trainer(template, pod)
    assert seen.problem == ""
    assert seen.per_pod is not None and seen.per_pod.extended == (("example.com/widget", 2),)
    assert seen.per_pod.cpu_request_milli == 250
    assert seen.constraints is not None
    assert seen.constraints.tolerations == (
        Toleration("example.com/widget", "Exists", "", "NoSchedule"),)
    assert seen.priority_class == "elastic"


def test_overhead_from_a_runtime_class_is_requested() -> None:
    template = _template()
    seen = admitted_trainer(template, _admitted(template, overhead={"cpu": "100m"}))
    assert seen.per_pod is not None and seen.per_pod.cpu_request_milli == 350


def test_what_admission_adds_and_the_planner_cannot_model_is_named() -> None:
    template = _template()
    foreign = {"labelSelector": {"matchLabels": {"app": "db"}},
               "topologyKey": "kubernetes.io/hostname"}
    pod = _admitted(template, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [foreign]}},
        schedulingGates=[{"name": "example.com/gate"}])
    seen = admitted_trainer(template, pod)
    assert seen.problem.startswith("admission adds to trainer pods what the planner cannot "
                                   "model: spec.affinity.podAntiAffinity."
                                   "requiredDuringSchedulingIgnoredDuringExecution.0 "), seen
    assert "spec.schedulingGates" in seen.problem
    # a self-selecting anti-affinity on hostname is modelled: no problem
    own = {"labelSelector": {"matchLabels": dict(LABELS)},
           "topologyKey": "kubernetes.io/hostname"}
    modelled = admitted_trainer(template, _admitted(template, affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [own]}}))
    assert modelled.problem == "" and modelled.constraints is not None
    assert [t.kind for t in modelled.constraints.topology] == ["apart"]


def test_what_the_template_carried_already_is_not_admissions() -> None:
    template = _template(schedulingGates=[{"name": "mine"}])
    assert admitted_trainer(template, _admitted(template)).problem == ""


def test_an_unreadable_admitted_request_is_a_problem_not_a_crash() -> None:
    template = _template()
    pod = _admitted(template)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    seen = admitted_trainer(template, pod)
    assert seen.per_pod is None
    assert seen.problem.startswith("the admitted trainer pod's requests: "), seen


def test_a_refusal_and_the_template_digest() -> None:
    assert refused_trainer("no PriorityClass with name x was found").problem == (
        "the API server refuses trainer pods: no PriorityClass with name x was found")
    template = _template()
    assert template_hash(template) == template_hash(copy.deepcopy(template))
    assert template_hash(template) != template_hash(_template(nodeSelector={"a": "b"}))

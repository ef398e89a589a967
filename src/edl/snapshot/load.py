"""A cluster snapshot (a Kubernetes `List`) -> the inputs of a scaling policy.

The snapshot is what `kubectl get
nodes,pods,trainingjobs,jobs,resourcequotas,priorityclasses -A -o json` prints: Node,
Pod, TrainingJob, `batch/v1` Job, ResourceQuota and PriorityClass objects, and on a
cluster that runs Kueue its ClusterQueues, LocalQueues and Workloads
(`edl.snapshot.kueue`). Nodes keep their labels and taints and each trainer Job's pod
template gives its trainers' constraints (tolerations, nodeSelector, affinity), so a job
is planned only onto nodes its pods can use; quotas bound what a namespace's jobs may
grow to; a pod without `spec.priority` takes its PriorityClass's value (the API server's
admission sets it, a hand-written snapshot may not). A trainer Job belongs to the
TrainingJob whose name it carries with the `-trainer` suffix, in the same namespace; a
pod belongs to the Job whose `spec.selector` matches its labels or that its
ownerReferences name. Pure: text in, plain data out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from edl.accounting import (
    TERMINAL_PHASES,
    ClusterResource,
    PodRequestError,
    ResourceError,
    inquire_resource,
    is_trainer_pod,
    trainer_request,
)
from edl.accounting.eligibility import constraints_of
from edl.accounting.quota import quota_room
from edl.accounting.request import extended_request
from edl.api.errors import JobValidationError, describe_input, format_problem
from edl.api.names import trainer_job_name
from edl.api.quantity import QuantityError
from edl.api.trainingjob import TrainingJob
from edl.api.yamlload import DuplicateKeyError, load_json_or_yaml
from edl.policy import JobView, Trainer
from edl.snapshot.kueue import KueueState, kueue_state, trainer_cap, waiting_reason

__all__ = [
    "PlanInputs",
    "SnapshotError",
    "Unplannable",
    "parse_snapshot",
    "plan_inputs",
    "selector_matches",
]



class SnapshotError(ValueError):
    """A snapshot that cannot be read; the message is one line naming the problem."""


@dataclass(frozen=True, slots=True)
class Unplannable:
    """An elastic (or unreadable) TrainingJob the policy cannot plan, and why."""

    namespace: str
    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What `Policy.plan` needs, plus the TrainingJobs left out of the plan."""

    jobs: list[JobView]
    resources: ClusterResource
    unplannable: list[Unplannable]


def parse_snapshot(text: str) -> list[dict[str, Any]]:
    """The items of a JSON or YAML `List` (a single object or a YAML stream also work)."""
    try:
        documents = [d for d in load_json_or_yaml(text) if d is not None]
    except DuplicateKeyError as error:
        raise SnapshotError(str(error.problem)) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SnapshotError(f"not JSON or YAML{where}") from None
    if not documents:
        raise SnapshotError("empty: expected a Kubernetes List (an object with `items`)")
    items: list[Any] = []
    for document in documents:
        if isinstance(document, Mapping) and isinstance(document.get("items"), list):
            items.extend(document["items"])
        elif isinstance(document, Mapping) and ("items" in document or _kind(document) == "List"):
            got = describe_input(document.get("items")) if "items" in document else "nothing"
            raise SnapshotError(f"items: must be a list of Kubernetes objects (got {got})")
        elif isinstance(document, Mapping) and "kind" in document:
            items.append(document)
        else:
            raise SnapshotError("expected a Kubernetes List (an object with `items`)")
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("kind"), str):
            raise SnapshotError(f"items[{index}]: not a Kubernetes object (no `kind`)")
        problem = _shape_problem(item)
        if problem:
            raise SnapshotError(f"items[{index}] ({item['kind']}): {problem}")
    return [dict(item) for item in items]


def _shape_problem(item: Mapping[str, Any]) -> str:
    """The first field this loader reads that has the wrong type, as `path: must be ...`."""
    metadata = item.get("metadata")
    if not isinstance(metadata, Mapping):
        return "metadata: must be a mapping"
    if not isinstance(metadata.get("name"), str) or not metadata["name"]:
        return "metadata.name is missing"
    if not isinstance(metadata.get("namespace") or "", str):
        return "metadata.namespace: must be a string"
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return "metadata.labels: must map strings to strings"
    owners = metadata.get("ownerReferences") or []
    if not isinstance(owners, list) or not all(isinstance(o, Mapping) for o in owners):
        return "metadata.ownerReferences: must be a list of mappings"
    for key in ("spec", "status"):
        if not isinstance(item.get(key) or {}, Mapping):
            return f"{key}: must be a mapping"
    if item["kind"] == "Job":
        selector = (item.get("spec") or {}).get("selector") or {}
        if not isinstance(selector, Mapping):
            return "spec.selector: must be a mapping"
        match_labels = selector.get("matchLabels") or {}
        if not isinstance(match_labels, Mapping):
            return "spec.selector.matchLabels: must be a mapping"
        expressions = selector.get("matchExpressions") or []
        if not isinstance(expressions, list) or not all(
            isinstance(e, Mapping) and isinstance(e.get("values") or [], list) for e in expressions
        ):
            return "spec.selector.matchExpressions: must be a list of {key, operator, values}"
    return ""


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A `LabelSelector` (matchLabels and matchExpressions) against a pod's labels.

    An empty or missing selector matches nothing here: a Job always has one.
    """
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _namespace(obj: Mapping[str, Any]) -> str:
    return obj["metadata"].get("namespace") or "default"


def _owned_by(pod: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    references = pod["metadata"].get("ownerReferences") or []
    name, uid = job["metadata"]["name"], job["metadata"].get("uid")
    return any(
        ref.get("kind") == "Job"
        and ref.get("name") == name
        and (uid is None or ref.get("uid") in (None, uid))
        for ref in references
    )


def _job_pods(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    namespace = _namespace(job)
    selector = (job.get("spec") or {}).get("selector")
    return [
        pod
        for pod in pods
        if _namespace(pod) == namespace
        and (_owned_by(pod, job) or selector_matches(selector, pod["metadata"].get("labels") or {}))
    ]


def plan_inputs(items: list[dict[str, Any]]) -> PlanInputs:
    """Policy inputs from snapshot items; raises SnapshotError for unreadable nodes or pods.

    A TrainingJob that does not parse, or whose trainer Job is missing, is listed in
    `unplannable` instead of failing the whole plan.
    """
    nodes = [item for item in items if item["kind"] == "Node"]
    classes = _priority_values(items)
    pods = [_with_priority(item, classes) for item in items if item["kind"] == "Pod"]
    trainer_jobs = {
        (_namespace(item), item["metadata"]["name"]): item
        for item in items
        if item["kind"] == "Job"
    }
    views: list[JobView] = []
    unplannable: list[Unplannable] = []
    trainer_pod_ids: set[int] = set()
    kueue = kueue_state(items)
    for item in items:
        if item["kind"] != "TrainingJob":
            continue
        planned, trainer_pods = _plan_job(item, trainer_jobs, pods, kueue)
        trainer_pod_ids.update(id(p) for p in trainer_pods)
        if isinstance(planned, JobView):
            views.append(planned)
        elif planned is not None:
            unplannable.append(planned)
    try:
        resources = inquire_resource(
            nodes, pods, is_trainer=lambda pod: id(pod) in trainer_pod_ids or is_trainer_pod(pod)
        )
        quotas = tuple(quota_room(item) for item in items if item["kind"] == "ResourceQuota")
    except (ResourceError, QuantityError, ValueError) as error:
        raise SnapshotError(str(error)) from None
    return PlanInputs(views, replace(resources, quotas=quotas), unplannable)


def _priority_values(items: list[dict[str, Any]]) -> dict[str, int]:
    """PriorityClass name -> value (and "" -> the global default's value, if any)."""
    values: dict[str, int] = {}
    for item in items:
        value = item.get("value")
        if item["kind"] != "PriorityClass" or not isinstance(value, int):
            continue
        values[item["metadata"]["name"]] = value
        if item.get("globalDefault") is True:
            values[""] = value
    return values


def _with_priority(pod: dict[str, Any], classes: Mapping[str, int]) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    if not classes or isinstance(spec.get("priority"), int):
        return pod
    value = classes.get(str(spec.get("priorityClassName") or ""))
    if value is None:
        return pod
    return {**pod, "spec": {**spec, "priority": value}}


def _plan_job(
    item: dict[str, Any],
    trainer_jobs: Mapping[tuple[str, str], dict[str, Any]],
    pods: list[dict[str, Any]],
    kueue: KueueState,
) -> tuple[JobView | Unplannable | None, list[Mapping[str, Any]]]:
    """One TrainingJob -> (its view, or why it cannot be planned, or None if not
    elastic; its non-terminal trainer pods, which are not "pending services")."""
    namespace, name = _namespace(item), item["metadata"]["name"]
    try:
        job = TrainingJob.from_dict(item)
        per_pod = trainer_request(job)
    except JobValidationError as error:
        problems = "; ".join(format_problem(p) for p in error.problems)
        return Unplannable(namespace, name, f"invalid TrainingJob: {problems}"), []
    except (PodRequestError, QuantityError) as error:
        return Unplannable(namespace, name, f"invalid TrainingJob: spec.trainer.{error}"), []
    if not job.elastic():
        return None, []
    trainer = trainer_jobs.get((namespace, trainer_job_name(name)))
    waiting = waiting_reason(kueue, item, trainer)
    if waiting:  # Kueue has not admitted it: starting it is Kueue's call
        return Unplannable(namespace, name, waiting), []
    if trainer is None:
        return Unplannable(namespace, name, f"no trainer Job {trainer_job_name(name)} yet"), []
    mine = [
        p
        for p in _job_pods(trainer, pods)
        if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES
    ]
    parallelism = (trainer.get("spec") or {}).get("parallelism")
    parallelism = 1 if parallelism is None else parallelism  # Kubernetes' default
    if not isinstance(parallelism, int) or isinstance(parallelism, bool):
        why = f"trainer Job spec.parallelism is not an integer: {parallelism!r}"
        return Unplannable(namespace, name, why), mine
    pod_spec = ((trainer.get("spec") or {}).get("template") or {}).get("spec") or {}
    if not isinstance(pod_spec, Mapping):
        pod_spec = {}
    if pod_spec:  # every resource the trainer pods ask for, extended ones included
        per_pod = replace(per_pod, extended=extended_request(pod_spec))
    cap = trainer_cap(kueue, trainer, {"cpu": per_pod.cpu_request_milli,
                                       "memory": per_pod.memory_request_mega})
    min_instance = int(job.spec.trainer.min_instance or 0)
    max_instance = int(job.spec.trainer.max_instance or 0)
    if cap is not None:  # what its ClusterQueue can still admit (never below its min)
        max_instance = max(min(max_instance, cap), min_instance)
    phases = [(p.get("status") or {}).get("phase") for p in mine]
    pending = [p for p, phase in zip(mine, phases, strict=True) if phase == "Pending"]
    view = JobView.from_pod_resources(
        namespace,
        name,
        min_instance=min_instance,
        max_instance=max_instance,
        parallelism=parallelism,
        per_pod=per_pod,
        total=len(mine),
        running=phases.count("Running"),
        pending=len(pending),
        unscheduled=sum(1 for p in pending if not (p.get("spec") or {}).get("nodeName")),
        trainers=tuple(
            Trainer(
                str((p.get("metadata") or {}).get("name", "")),
                str((p.get("spec") or {}).get("nodeName") or ""),
                bool((p.get("metadata") or {}).get("deletionTimestamp")),
            )
            for p in mine
        ),
        constraints=constraints_of(pod_spec),
        priority_class=str(pod_spec.get("priorityClassName") or ""),
        terminating=pod_spec.get("activeDeadlineSeconds") is not None,
    )
    return view, mine


def _kind(document: Mapping[str, Any]) -> Any:
    return document.get("kind")

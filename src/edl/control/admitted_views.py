"""A job's view as admission makes its trainers, and the reason of a job held for it (pure).

Why: the planner must size and place the pods kube-scheduler will see — the admitted
pod of a server-side dry-run create (`edl.accounting.admitted`), not the template. A
trainer pod the API server refuses, or one admission gives what the planner cannot
model, must not be planned larger: the job is held at its size (never below its min),
and its decision's reason says why, so `status.plan` shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from edl.accounting.admitted import AdmittedTrainer
from edl.policy import Decision, JobView

__all__ = ["explained", "with_admission"]


def with_admission(view: JobView, admitted: AdmittedTrainer | None) -> JobView:
    """`view` planned from the admitted trainer pod (unchanged when none is known)."""
    if admitted is None:
        return view
    changes: dict[str, Any] = {}
    pod = admitted.per_pod
    if pod is not None:
        changes.update(
            cpu_request_milli=pod.cpu_request_milli, cpu_limit_milli=pod.cpu_limit_milli,
            memory_request_mega=pod.memory_request_mega,
            memory_limit_mega=pod.memory_limit_mega, gpu_request=pod.gpu_request,
            gpu_limit=pod.gpu_limit, extended=pod.extended)
    if admitted.constraints is not None:
        changes["constraints"] = admitted.constraints
    if admitted.priority_class:
        changes["priority_class"] = admitted.priority_class  # quota scopes read it
    if admitted.problem:
        held = max(view.parallelism, view.min_instance)
        changes["max_instance"] = max(min(view.max_instance, held), view.min_instance)
    return replace(view, **changes)


def explained(decisions: Sequence[Decision],
              problems: Mapping[tuple[str, str], str]) -> list[Decision]:
    """Each held job's decision, unless it shrinks, with the problem right after its verb
    and counts (`keep 2: the API server refuses trainer pods: …`); the policy's own
    bound follows after " | ", so `status.plan` shows why the job is not grown."""
    out = []
    for decision in decisions:
        problem = problems.get((decision.namespace, decision.name))
        if problem and decision.target >= decision.parallelism:
            verb, _, rest = decision.reason.partition(": ")
            decision = replace(decision, reason=f"{verb}: {problem} | {rest}")
        out.append(decision)
    return out

"""TrainingJob manifests for the jobs of a scenario, with autoscaling on or off.

With autoscaling off (policy ``static``) a job is not elastic: its trainer range
collapses to the static count, as the original's OFF runs used fixed trainers.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from edl.accounting.kueue import PRIORITY_LABEL, QUEUE_LABEL
from edl.api.names import ANNOTATION_JOIN_COST, ANNOTATION_THROUGHPUT_PRIOR
from edl.sim.scenario import JobPlan
from edl.throughput.annotations import curve_to_dict

API_VERSION = "edl.dev/v1"


def _compact_manifest(plan: JobPlan, image: str) -> dict[str, Any]:
    group = plan.group
    assert group.trainer is not None and group.pserver is not None and group.master is not None
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingJob",
        "metadata": {"name": plan.name, "namespace": plan.namespace},
        "spec": {
            "image": image,
            "fault_tolerant": True,
            "trainer": {
                "entrypoint": "python train.py",
                "workspace": "/workspace",
                "min-instance": group.trainer.min,
                "max-instance": group.trainer.max,
                "resources": group.trainer.resources.to_requirements(),
            },
            "pserver": {
                "min-instance": group.pserver.count,
                "max-instance": group.pserver.count,
                "resources": group.pserver.resources.to_requirements(),
            },
            "master": {"resources": group.master.resources.to_requirements()},
        },
    }


def batch_spec(plan: JobPlan, manifest: dict[str, Any]) -> dict[str, int]:
    """``spec.batch`` of a job with ``noise_scale``: the scenario's initial batch is at the
    start trainer count, the spec's at min-instance (same per-trainer batch)."""
    work = plan.work
    assert work is not None and work.initial_batch is not None
    low = int(manifest["spec"]["trainer"]["min-instance"])
    start = plan.start_trainers or low
    initial = max(1, round(work.initial_batch * low / start))
    top = max(initial, work.max_batch or work.initial_batch)
    return {"initial": initial, "max": top}


def training_job_manifest(plan: JobPlan, image: str, *, elastic: bool) -> dict[str, Any]:
    """The TrainingJob object the simulator submits for ``plan``."""
    if plan.group.spec is not None:
        manifest = copy.deepcopy(plan.group.spec)
        metadata = manifest.setdefault("metadata", {})
        metadata["name"] = plan.name
        metadata["namespace"] = plan.namespace
    else:
        manifest = _compact_manifest(plan, image)
    work = plan.work
    if work is not None:  # what the job declares to a throughput-aware autoscaler
        annotations = manifest["metadata"].setdefault("annotations", {})
        if work.prior is not None:
            annotations[ANNOTATION_THROUGHPUT_PRIOR] = json.dumps(
                curve_to_dict(work.prior.curve()), sort_keys=True
            )
        annotations[ANNOTATION_JOIN_COST] = f"{work.join_cost_s:g}"
    if work is not None and work.initial_batch is not None:  # the job adapts its batch
        manifest["spec"]["batch"] = batch_spec(plan, manifest)
    labels = {key: value for key, value in (
        (QUEUE_LABEL, plan.group.queue), (PRIORITY_LABEL, plan.group.queue_priority_class))
        if value}
    if labels:  # queued by Kueue (the scenario's kueue section)
        manifest["metadata"].setdefault("labels", {}).update(labels)
    if not elastic:
        trainer = manifest["spec"]["trainer"]
        trainer["min-instance"] = trainer["max-instance"] = plan.static_trainers
    return manifest

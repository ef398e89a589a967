"""The rules about a role's pod fields that the schema alone does not state.

Why: the models in `edl.api.podscheduling`/`podcontainer` check each field as
Kubernetes does; these are edl's own rules on top, each a way a job could break
edl's pods rather than Kubernetes' rules: a label under `edl.dev/` could steal or
break the selectors edl's ReplicaSets, Job and trainer controller rely on, and an
`env` entry could redefine a variable edl's processes are configured by.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from edl.accounting.eligibility import topology_problems
from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_TRAINER
from edl.api.trainingjob import TrainingJob
from edl.jobparser.manifests import EDL_ENV_NAMES

__all__ = ["EDL_LABEL_PREFIX", "pod_option_problems"]

EDL_LABEL_PREFIX = "edl.dev/"
Loc = tuple[str | int, ...]


def pod_option_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    """Every problem of the roles' pod fields (`spec.master|pserver|trainer.*`)."""
    for role in ("master", "pserver", "trainer"):
        options = getattr(job.spec, role)
        loc: Loc = ("spec", role)
        if options.image is not None and not options.image.strip():
            yield (*loc, "image"), "must not be empty (leave it out for spec.image)"
        for key in options.labels or {}:
            if key.startswith(EDL_LABEL_PREFIX):
                yield (
                    (*loc, "labels", key),
                    f"labels under {EDL_LABEL_PREFIX} are edl's own (edl.dev/job and "
                    "edl.dev/role select the role's pods); use another key",
                )
        seen: set[str] = set()
        for index, variable in enumerate(options.env or []):
            if variable.name in EDL_ENV_NAMES:
                yield (
                    (*loc, "env", index, "name"),
                    f"{variable.name} is set by edl from the TrainingJob; set the spec field "
                    "instead",
                )
            elif variable.name in seen:
                yield (*loc, "env", index, "name"), f"{variable.name} is set twice"
            seen.add(variable.name)
    yield from _trainer_topology_problems(job)
    etcd_image = job.spec.master.etcd_image
    if etcd_image is not None and not etcd_image.strip():
        yield ("spec", "master", "etcd-image"), "must not be empty (leave it out for the default)"


def _trainer_topology_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    """Required pod (anti-)affinity and DoNotSchedule spread on trainers that the
    planner cannot model (it would plan trainers that never land)."""
    options = job.spec.trainer
    spec: dict[str, Any] = {}
    if options.affinity is not None:
        spec["affinity"] = options.affinity.model_dump(mode="json", exclude_none=True)
    if options.topology_spread_constraints is not None:
        spec["topologySpreadConstraints"] = [
            c.model_dump(mode="json", by_alias=True, exclude_none=True)
            for c in options.topology_spread_constraints]
    if not spec:
        return
    labels = {**(options.labels or {}), LABEL_JOB: job.metadata.name or "",
              LABEL_ROLE: ROLE_TRAINER}
    for path, why in topology_problems(spec, labels):
        yield ("spec", "trainer", *path), f"the autoscaler cannot plan for this rule: {why}"

"""The job's state on volumes it names: the etcd sidecar's data (`spec.master.etcd-volume`)
and the pservers' checkpoints (`spec.pserver.checkpoint-volume`).

Why: the master keeps its task queue in etcd, and each pserver's checkpoint metadata is
there too. By default etcd's data is an emptyDir, deleted with the master pod, so a new
master pod (a node drain, an eviction, Kueue preempting the servers) would start the
passes again, and a pserver checkpoints inside its own container. On a volume that
outlives the pods, the new master pod's etcd reopens the same data dir (a single member
whose peer URL is localhost: a new pod IP changes only its advertised client URL, which
etcd republishes at start) and a new pserver pod reads the file its metadata names.

Each job gets its own directories, named after the job and its uid (a job deleted and
created again under the same name starts afresh): ``<mount>/edl-etcd/<job>-<uid>`` and
``<mount>/edl-checkpoints/<job>-<uid>``. The pods get ``fsGroup`` (unless the job sets
one) so that both etcd (user 65532) and the runtime (user 10001) may write on a volume
whose driver applies it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from edl.api.trainingjob import TrainingJob

__all__ = [
    "STATE_FS_GROUP",
    "STATE_MOUNT",
    "checkpoint_dir",
    "etcd_data_dir",
    "other_roles_state",
    "state_mount",
    "state_pod_security",
    "state_volume_problems",
]

STATE_MOUNT = "/var/lib/edl-state"  # where the named volume is mounted in edl's containers
ETCD_SUBDIR = "edl-etcd"
CHECKPOINT_SUBDIR = "edl-checkpoints"
# the runtime image's group (deploy/Dockerfile.runtime); etcd gets it as a supplementary group
STATE_FS_GROUP = 10001
# volumes deleted with their pod: naming one would keep nothing
_POD_BOUND = {"emptyDir": "an emptyDir", "ephemeral": "an ephemeral volume"}
Loc = tuple[str | int, ...]


def _job_dir(job: TrainingJob) -> str:
    name = job.metadata.name or ""
    return f"{name}-{job.metadata.uid}" if job.metadata.uid else name


def etcd_data_dir(job: TrainingJob) -> str | None:
    """The etcd sidecar's `--data-dir` on `spec.master.etcd-volume`, if the job names one."""
    if not job.spec.master.etcd_volume:
        return None
    return f"{STATE_MOUNT}/{ETCD_SUBDIR}/{_job_dir(job)}"


def checkpoint_dir(job: TrainingJob) -> str | None:
    """The pservers' `EDL_CHECKPOINT_DIR` on `spec.pserver.checkpoint-volume`, if named."""
    if not job.spec.pserver.checkpoint_volume:
        return None
    return f"{STATE_MOUNT}/{CHECKPOINT_SUBDIR}/{_job_dir(job)}"


def other_roles_state(job: TrainingJob, role: str) -> set[str]:
    """The state volumes a role's pods leave out: those only another role writes on (not
    in `spec.volumeMounts`), so a ReadWriteOnce claim for the master's etcd is attached to
    the master pod alone, not to every trainer's node."""
    master, pserver = job.spec.master, job.spec.pserver
    own = {"master": master.etcd_volume if not master.etcd_endpoint else None,
           "pserver": pserver.checkpoint_volume}
    mounted = {m.get("name") for m in job.spec.volume_mounts or []}
    return {name for other, name in own.items()
            if name and other != role and name != own.get(role) and name not in mounted}


def state_mount(volume: str) -> dict[str, Any]:
    return {"name": volume, "mountPath": STATE_MOUNT}


def state_pod_security(template: dict[str, Any]) -> None:
    """Give a pod that writes on a state volume `fsGroup` (the job's own value wins), with
    `OnRootMismatch` so a large volume is not walked again at every pod start."""
    security = template["spec"].setdefault("securityContext", {})
    security.setdefault("fsGroup", STATE_FS_GROUP)
    security.setdefault("fsGroupChangePolicy", "OnRootMismatch")


def state_volume_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    """What is wrong with `etcd-volume` and `checkpoint-volume`, each named by its field."""
    master, pserver = job.spec.master, job.spec.pserver
    if master.etcd_volume is not None:
        loc: Loc = ("spec", "master", "etcd-volume")
        if master.etcd_endpoint:
            yield loc, ("the master has no etcd sidecar with spec.master.etcd-endpoint (that "
                        "etcd keeps the state); leave one of them out")
        else:
            yield from _volume_problems(job, loc, master.etcd_volume)
    if pserver.checkpoint_volume is not None:
        loc = ("spec", "pserver", "checkpoint-volume")
        yield from _volume_problems(job, loc, pserver.checkpoint_volume)
        if any(v.name == "EDL_CHECKPOINT_DIR" for v in pserver.env or []):
            yield loc, ("spec.pserver.env sets EDL_CHECKPOINT_DIR too; keep one of them (this "
                        f"field sets it to {STATE_MOUNT}/{CHECKPOINT_SUBDIR}/<job>-<uid>)")
        for index, mount in enumerate(job.spec.volume_mounts or []):
            if str(mount.get("mountPath", "")).rstrip("/") == STATE_MOUNT:
                yield (("spec", "volumeMounts", index, "mountPath"),
                       f"{STATE_MOUNT} is where spec.pserver.checkpoint-volume is mounted; "
                       "mount this volume elsewhere")


def _volume_problems(job: TrainingJob, loc: Loc, name: str) -> Iterator[tuple[Loc, str]]:
    volumes = [v for v in job.spec.volumes or [] if isinstance(v.get("name"), str)]
    volume = next((v for v in volumes if v["name"] == name), None)
    if volume is None:
        have = ", ".join(repr(v["name"]) for v in volumes) or "none"
        yield loc, f"no volume named {name!r} in spec.volumes (it has {have})"
        return
    kind = next((k for k in _POD_BOUND if k in volume), None)
    if kind:
        yield loc, (f"volume {name!r} is {_POD_BOUND[kind]}, deleted with the pod; name one "
                    "that outlives it (a persistentVolumeClaim, nfs, ...)")
    for source in volume.values():
        if isinstance(source, dict) and source.get("readOnly") is True:
            yield loc, f"volume {name!r} is read-only; the job's state is written to it"

"""A collective TrainingJob -> its children: master Service, rendezvous ReplicaSet, trainer Job.

Why these shapes: the master pod hosts the c10d rendezvous store (`edl
rendezvous`, a `torch.distributed.TCPStore` server) and, unless the job names an
external etcd, the etcd sidecar the job's progress goes to; the master Service
gives the store a stable name (`<job>-master.<namespace>.svc:<port>`). Each
trainer pod runs `edl agent`: torch's elastic agent with `--nnodes=min:max`,
one node per pod, its workers reaching each other through the rank-0 agent's
pod IP (no per-pod DNS name is needed, so no headless Service). The trainer Job
keeps the parameter-server Job's podFailurePolicy: a drained agent (SIGTERM)
exits 143 and is ignored, a crash counts.
"""

from __future__ import annotations

from typing import Any

from edl.api.trainingjob import CollectiveSpec, TrainingJob
from edl.jobparser import manifests as m
from edl.jobparser.collective import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_NPROC_PER_NODE,
    checkpoint_dir,
    job_allowed_counts,
)
from edl.jobparser.podtemplate import finish_container

__all__ = [
    "RENDEZVOUS_PORT_NAME",
    "collective_env",
    "master_replica_set",
    "master_service",
    "rendezvous_endpoint",
    "trainer_job",
]

RENDEZVOUS_PORT_NAME = "rendezvous"


def rendezvous_endpoint(job: TrainingJob) -> str:
    """host:port of the c10d store through the master Service."""
    namespace = job.metadata.namespace or "default"
    service = m.child_names(m._name(job))["master"]
    return f"{service}.{namespace}.svc:{m._int(job.spec.port)}"


def master_replica_set(job: TrainingJob) -> dict[str, Any]:
    """One master pod: the rendezvous store, plus etcd unless `master.etcd-endpoint`."""
    port = m._port(RENDEZVOUS_PORT_NAME, m._int(job.spec.port))
    container = _container(job, "master", ["edl", "rendezvous"], job.spec.master.resources)
    container["ports"] = [port]
    containers = [container]
    volumes = list(job.spec.volumes or [])
    if not job.spec.master.etcd_endpoint:
        containers.append(m.etcd_container(job))
        volumes += m.etcd_volumes(job)
    return m.with_state_security(job, m._replica_set(job, "master", 1, containers, volumes))


def master_service(job: TrainingJob) -> dict[str, Any]:
    """`<job>-master`: the rendezvous port and, with the sidecar, etcd."""
    service = m.master_service(job)
    port = m._int(job.spec.port)
    service["spec"]["ports"][0] = {"name": RENDEZVOUS_PORT_NAME, "port": port, "targetPort": port}
    return service


def trainer_job(job: TrainingJob) -> dict[str, Any]:
    """The agents as a work-queue Job (parallelism = min-instance), running `edl agent`."""
    container = _container(job, "trainer", ["edl", "agent"], job.spec.trainer.resources)
    return m.trainer_job(job, container)


def collective_env(job: TrainingJob) -> list[dict[str, Any]]:
    """The agent's and the store's environment (EDL_* names; the contract in docs/collective.md)."""
    spec = job.spec
    collective = spec.collective or CollectiveSpec()
    values = {
        "EDL_JOB_NAME": m._name(job),
        "EDL_MODE": "collective",
        "EDL_TRAINERS": m._int(spec.trainer.min_instance),
        "EDL_TRAINERS_MAX": m._int(spec.trainer.max_instance),
        "EDL_NPROC_PER_NODE": collective.nproc_per_node or DEFAULT_NPROC_PER_NODE,
        "EDL_MAX_RESTARTS": (
            collective.max_restarts
            if collective.max_restarts is not None
            else DEFAULT_MAX_RESTARTS
        ),
        # before EDL_ENTRYPOINT: the kubelet expands $(EDL_CHECKPOINT_DIR) in it
        "EDL_CHECKPOINT_DIR": checkpoint_dir(job),
        "EDL_ENTRYPOINT": spec.trainer.entrypoint or "",
        "EDL_WORKSPACE": spec.trainer.workspace or "",
        "EDL_PORT": m._int(spec.port),
        "EDL_RDZV_ENDPOINT": rendezvous_endpoint(job),
        "EDL_USE_GPU": 1 if m.uses_gpu(job) else 0,
        "EDL_ETCD_ENDPOINTS": m.etcd_endpoints(job),
        "EDL_LIVE": 1 if collective.live else 0,
        # the world sizes a resize may give (a live world admits joiners to these only)
        "EDL_WORLD_SIZES": ",".join(
            str(count * (collective.nproc_per_node or DEFAULT_NPROC_PER_NODE))
            for count in job_allowed_counts(job)
        ),
    }
    env: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in values.items()]
    env.insert(1, m._field_env("EDL_NAMESPACE", "metadata.namespace"))
    env.append(m._field_env("EDL_POD_IP", "status.podIP"))
    env.append(m._field_env("EDL_POD_NAME", "metadata.name"))
    return env


def _container(
    job: TrainingJob, role: str, command: list[str], resources: Any
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": role,
        "image": job.spec.image,
        "command": command,
        "env": collective_env(job),
    }
    finish_container(job, role, container)
    container["resources"] = m._resources(resources, role)
    if job.spec.volume_mounts:
        container["volumeMounts"] = [dict(v) for v in job.spec.volume_mounts]
    return container

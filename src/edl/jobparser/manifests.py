"""TrainingJob -> child manifests (plain dicts), valid for current Kubernetes.

Why these shapes: the master and pservers are long-running, so they are
`apps/v1` ReplicaSets; trainers are a `batch/v1` Job whose `parallelism` the
autoscaler changes. Every child carries `edl.dev/job` and `edl.dev/role`
labels so each role can be selected, and an ownerReference to the TrainingJob
so deleting the job deletes its children. Configuration reaches the processes
only through `EDL_*` environment variables.
"""

from __future__ import annotations

from typing import Any

from edl.api.installation import DEFAULT_INSTALLATION, managed_by
from edl.api.k8snames import is_extended_resource
from edl.api.names import LABEL_JOB, LABEL_ROLE, child_names
from edl.api.quantity import parse_quantity
from edl.api.resources import GPU, GPU_LEGACY
from edl.api.role_requests import ROLE_REQUESTS, with_default_requests
from edl.api.trainingjob import ResourceRequirements, TrainingJob
from edl.jobparser.podtemplate import ETCD_RUN_AS, finish_container, pod_template
from edl.jobparser.statevolumes import (
    checkpoint_dir,
    etcd_data_dir,
    state_mount,
    state_pod_security,
)

__all__ = [
    "EDL_ENV_NAMES",
    "ETCD_CLIENT_PORT",
    "ETCD_IMAGE",
    "LABEL_JOB",
    "LABEL_ROLE",
    "TRAINER_BACKOFF_MIN",
    "TRAINER_BACKOFF_PER_TRAINER",
    "TRAINER_SIGTERM_EXIT",
    "child_names",
    "etcd_endpoints",
    "etcd_volumes",
    "master_replica_set",
    "master_service",
    "pserver_replica_set",
    "role_labels",
    "trainer_backoff_limit",
    "trainer_job",
    "with_state_security",
]

# the etcd sidecar's image when neither the job (spec.master.etcd-image) nor the
# controller (`edl controller --etcd-image`) names one
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
ETCD_CLIENT_PORT = 2379
ETCD_DATA_VOLUME = "edl-etcd-data"
ETCD_DATA_PATH = "/var/lib/etcd"  # the sidecar's data dir on its emptyDir
# A trainer drained by SIGTERM (a scale-down, a pod deletion) exits 128 + SIGTERM, not 0:
# with `completions` unset, one pod exiting 0 would tell Kubernetes the work is done.
# See edl.runtime.trainer.api.SIGTERM_EXIT (not imported: the parser stays below the runtime).
TRAINER_SIGTERM_EXIT = 143
# `edl trainer` exits EX_CONFIG (sysexits.h) when its configuration is wrong (no entrypoint,
# a workspace that is not a directory): every replacement would fail alike, so it fails the Job
TRAINER_CONFIG_EXIT = 78
# the trainer Job's spec.managedBy: edl's controller, not the Job controller, runs its pods
TRAINER_MANAGED_BY = managed_by(DEFAULT_INSTALLATION)  # the default installation's
# Failures that count against backoffLimit (crashes, OOM kills, SIGKILLs) may happen this many
# times per trainer slot before the Job fails; drained scale-downs and evictions never count.
TRAINER_BACKOFF_PER_TRAINER = 2
TRAINER_BACKOFF_MIN = 6  # Kubernetes' default backoffLimit
# every variable edl sets in its containers (both modes): a role's `env` may not redefine them
EDL_ENV_NAMES = frozenset({
    "EDL_JOB_NAME", "EDL_NAMESPACE", "EDL_TRAINERS", "EDL_TRAINERS_MAX", "EDL_PSERVERS",
    "EDL_ENTRYPOINT", "EDL_WORKSPACE", "EDL_PORT", "EDL_PORTS_NUM", "EDL_PORTS_NUM_FOR_SPARSE",
    "EDL_PASSES", "EDL_USE_GPU", "EDL_ETCD_ENDPOINTS", "EDL_POD_IP", "EDL_POD_NAME",
    "EDL_MODE", "EDL_NPROC_PER_NODE", "EDL_MAX_RESTARTS", "EDL_RDZV_ENDPOINT",
    "EDL_WORLD_SIZES", "EDL_LIVE", "EDL_BATCH_INITIAL",
})
# a TrainingJob's Kueue labels, copied onto its trainer Job: Kueue's Job webhook then
# creates it suspended and admits it through the named LocalQueue
QUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")
# ... and an elastic one's trainer Job opts in to Kueue's resizes (edl.accounting.kueue)
KUEUE_ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"


def role_labels(job: TrainingJob, role: str) -> dict[str, str]:
    """The labels that select one role of one job."""
    return {LABEL_JOB: _name(job), LABEL_ROLE: role}


def etcd_endpoints(job: TrainingJob) -> str:
    """The etcd the job's processes use: the external one if given, else the master's sidecar."""
    if job.spec.master.etcd_endpoint:
        return job.spec.master.etcd_endpoint
    namespace = job.metadata.namespace or "default"
    return f"http://{child_names(_name(job))['master']}.{namespace}.svc:{ETCD_CLIENT_PORT}"


def master_replica_set(job: TrainingJob) -> dict[str, Any]:
    """One master pod; with an etcd sidecar unless `spec.master.etcd-endpoint` is set."""
    spec = job.spec
    containers = [
        _container(job, "master", spec.master.resources, [_port("master", _int(spec.port))])
    ]
    volumes = list(spec.volumes or [])
    if not spec.master.etcd_endpoint:
        containers.append(etcd_container(job))
        volumes += etcd_volumes(job)
    return with_state_security(job, _replica_set(job, "master", 1, containers, volumes))


def etcd_volumes(job: TrainingJob) -> list[dict[str, Any]]:
    """The volume the etcd sidecar adds to the master pod: an emptyDir, lost with the pod,
    unless the job names one of its own (`spec.master.etcd-volume`)."""
    return [] if job.spec.master.etcd_volume else [{"name": ETCD_DATA_VOLUME, "emptyDir": {}}]


def with_state_security(job: TrainingJob, replica_set: dict[str, Any]) -> dict[str, Any]:
    """The master's or the pservers' ReplicaSet, with `fsGroup` when it writes on a volume
    the job names (`edl.jobparser.statevolumes`)."""
    master = replica_set["metadata"]["labels"][LABEL_ROLE] == "master"
    named = job.spec.master.etcd_volume if master else job.spec.pserver.checkpoint_volume
    if named and not (master and job.spec.master.etcd_endpoint):
        state_pod_security(replica_set["spec"]["template"])
    return replica_set


def pserver_replica_set(job: TrainingJob) -> dict[str, Any]:
    """`pserver.min-instance` parameter servers, each listening on the job's port range."""
    spec = job.spec
    first = _int(spec.port)
    count = _int(spec.ports_num) + _int(spec.ports_num_for_sparse)
    ports = [_port(f"pserver-{i}", first + i) for i in range(count)]
    container = _container(job, "pserver", spec.pserver.resources, ports)
    directory = checkpoint_dir(job)
    if directory and spec.pserver.checkpoint_volume:
        # before the user's variables, which may refer to it as $(EDL_CHECKPOINT_DIR)
        container["env"].insert(len(_env(job)), {"name": "EDL_CHECKPOINT_DIR",
                                                 "value": directory})
        container["volumeMounts"] = [*container.get("volumeMounts", []),
                                     state_mount(spec.pserver.checkpoint_volume)]
    replicas = _int(spec.pserver.min_instance)
    return with_state_security(job, _replica_set(job, "pserver", replicas, [container],
                                                 list(spec.volumes or [])))


def trainer_job(
    job: TrainingJob, container: dict[str, Any] | None = None, managed: bool = True
) -> dict[str, Any]:
    """The trainers as a work-queue Job: parallelism = min-instance, completions unset.

    ``container``: the trainer container to run (collective jobs pass their agent's);
    ``managed``: with ``spec.managedBy`` (edl's controller runs its pods).
    """
    name = child_names(_name(job))["trainer"]
    if container is None:
        container = _container(job, "trainer", job.spec.trainer.resources, [])
    # a crashed trainer's log tail becomes its termination message: the Controller puts
    # it in the TrainingJob's Failed status
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    template = pod_template(job, "trainer", [container], job.spec.volumes)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job, name, "trainer"),
        "spec": {
            "parallelism": _int(job.spec.trainer.min_instance),
            "backoffLimit": trainer_backoff_limit(_int(job.spec.trainer.max_instance)),
            # edl's controller runs these pods, not the Job controller, whose failure
            # back-off would hold every scale-up after drains (docs/architecture.md).
            # The policy below is what a cluster without JobManagedBy (< 1.32) applies.
            **({"managedBy": managed_by()} if managed else {}),
            "podFailurePolicy": {
                "rules": [
                    # a trainer drained by SIGTERM (scale-down, pod deletion) did nothing wrong
                    {
                        "action": "Ignore",
                        "onExitCodes": {
                            "containerName": "trainer",
                            "operator": "In",
                            "values": [TRAINER_SIGTERM_EXIT],
                        },
                    },
                    # nor did one removed by eviction, preemption or a node going away
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                    # a configuration error fails the Job at once, not after backoffLimit tries
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": "trainer",
                            "operator": "In",
                            "values": [TRAINER_CONFIG_EXIT],
                        },
                    },
                ]
            },
            "template": template,
        },
    }


def trainer_backoff_limit(max_instance: int) -> int:
    """The trainer Job's ``backoffLimit``: room for a few real failures per trainer slot.

    Only failures the podFailurePolicy does not ignore count, so a script that
    crashes every time fails the Job (reason ``BackoffLimitExceeded``) after
    ``limit + 1`` attempts, while any number of scale-downs and evictions do not.
    """
    return max(TRAINER_BACKOFF_MIN, TRAINER_BACKOFF_PER_TRAINER * max_instance)


def master_service(job: TrainingJob) -> dict[str, Any]:
    """A Service in front of the master pod: its port and, with the sidecar, etcd."""
    ports = [{"name": "master", "port": _int(job.spec.port), "targetPort": _int(job.spec.port)}]
    if not job.spec.master.etcd_endpoint:
        ports.append({"name": "etcd", "port": ETCD_CLIENT_PORT, "targetPort": ETCD_CLIENT_PORT})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, child_names(_name(job))["master"], "master"),
        "spec": {"selector": role_labels(job, "master"), "ports": ports},
    }


# -- building blocks -----------------------------------------------------------------------


def _elastic(job: TrainingJob) -> bool:
    trainer = job.spec.trainer
    return _int(trainer.min_instance) < _int(trainer.max_instance or trainer.min_instance)


def _name(job: TrainingJob) -> str:
    if not job.metadata.name:
        raise ValueError("the TrainingJob has no metadata.name; validate it first")
    return job.metadata.name


def _int(value: int | None) -> int:
    if value is None:
        raise ValueError("the TrainingJob lacks defaults; run JobParser.validate first")
    return value


def _metadata(job: TrainingJob, name: str, role: str) -> dict[str, Any]:
    labels = role_labels(job, role)
    if role == "trainer":  # Kueue queues the trainer Job (docs/kubernetes.md, "Kueue")
        labels |= {key: value for key, value in (job.metadata.labels or {}).items()
                   if key in QUEUE_LABELS}
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if role == "trainer" and labels.get(QUEUE_LABELS[0]) and _elastic(job):
        # Kueue resizes it through Workload slices, gating pods it has not admitted
        metadata["annotations"] = {KUEUE_ELASTIC_ANNOTATION: "true"}
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    if job.metadata.uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": job.api_version,
                "kind": job.kind,
                "name": _name(job),
                "uid": job.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return metadata


def _replica_set(
    job: TrainingJob,
    role: str,
    replicas: int,
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": _metadata(job, child_names(_name(job))[role], role),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": role_labels(job, role)},
            "template": pod_template(job, role, containers, volumes),
        },
    }


def _container(
    job: TrainingJob, role: str, resources: ResourceRequirements, ports: list[dict[str, Any]]
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": role,
        "image": job.spec.image,
        "command": ["edl", role],
        "env": _env(job),
    }
    finish_container(job, role, container)
    if ports:
        container["ports"] = ports
    container["resources"] = _resources(resources, role)
    if job.spec.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in job.spec.volume_mounts]
    return container


def etcd_container(job: TrainingJob) -> dict[str, Any]:
    """etcd for the job, listening on every address of the master pod, as a non-root user."""
    return {
        "name": "etcd",
        "image": job.spec.master.etcd_image or ETCD_IMAGE,
        "command": [
            "etcd",
            "--name=etcd0",
            f"--data-dir={etcd_data_dir(job) or ETCD_DATA_PATH}",
            f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
            f"--advertise-client-urls=http://$(EDL_POD_IP):{ETCD_CLIENT_PORT}",
        ],
        "env": [_field_env("EDL_POD_IP", "status.podIP")],
        "ports": [_port("etcd", ETCD_CLIENT_PORT)],
        "volumeMounts": [state_mount(job.spec.master.etcd_volume) if job.spec.master.etcd_volume
                         else {"name": ETCD_DATA_VOLUME, "mountPath": ETCD_DATA_PATH}],
        "securityContext": dict(ETCD_RUN_AS),
        "resources": {"requests": dict(ROLE_REQUESTS["etcd"])},
    }


def _env(job: TrainingJob) -> list[dict[str, Any]]:
    """The environment the original passed, under EDL_* names."""
    spec = job.spec
    values = {
        "EDL_JOB_NAME": _name(job),
        "EDL_TRAINERS": _int(spec.trainer.min_instance),
        "EDL_TRAINERS_MAX": _int(spec.trainer.max_instance),
        "EDL_PSERVERS": _int(spec.pserver.min_instance),
        "EDL_ENTRYPOINT": spec.trainer.entrypoint or "",
        "EDL_WORKSPACE": spec.trainer.workspace or "",
        "EDL_PORT": _int(spec.port),
        "EDL_PORTS_NUM": _int(spec.ports_num),
        "EDL_PORTS_NUM_FOR_SPARSE": _int(spec.ports_num_for_sparse),
        "EDL_PASSES": _int(spec.passes),
        "EDL_USE_GPU": 1 if uses_gpu(job) else 0,
        "EDL_ETCD_ENDPOINTS": etcd_endpoints(job),
    }
    if spec.batch is not None and spec.batch.initial:  # pservers sum pushes to the batch
        values["EDL_BATCH_INITIAL"] = _int(spec.batch.initial)
    env: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in values.items()]
    env.insert(1, _field_env("EDL_NAMESPACE", "metadata.namespace"))
    env.append(_field_env("EDL_POD_IP", "status.podIP"))
    env.append(_field_env("EDL_POD_NAME", "metadata.name"))
    return env


def uses_gpu(job: TrainingJob) -> bool:
    """Trainers are limited to a GPU of any vendor (nvidia.com/gpu, amd.com/gpu, ...)."""
    resources = job.spec.trainer.resources  # a request alone implies the limit
    wanted = {**(resources.requests or {}), **(resources.limits or {})}
    return job.need_gpu() or any(
        name.endswith("/gpu") and parse_quantity(value) > 0 for name, value in wanted.items()
    )


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _port(name: str, number: int) -> dict[str, Any]:
    return {"name": name, "containerPort": number, "protocol": "TCP"}


def _resources(resources: ResourceRequirements, role: str) -> dict[str, dict[str, str]]:
    """Copy limits/requests, every resource name kept; the legacy GPU name becomes
    `nvidia.com/gpu`, an extended resource (GPUs of any vendor, ...) requested
    without a limit gets one (Kubernetes requires limit = request for them), and
    cpu and memory the role leaves out get its default request (api/role_requests.py)."""
    out: dict[str, dict[str, str]] = {}
    for kind in ("limits", "requests"):
        values = dict(getattr(resources, kind) or {})
        if GPU_LEGACY in values:
            values.setdefault(GPU, values.pop(GPU_LEGACY))
            values.pop(GPU_LEGACY, None)
        if values:
            out[kind] = values
    for name, request in out.get("requests", {}).items():
        if is_extended_resource(name) and name not in out.get("limits", {}):
            out.setdefault("limits", {})[name] = request
    return with_default_requests(role, out)

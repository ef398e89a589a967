"""`JobParser.validate`: fill the original defaults, then report every problem at once.

Why salvage: a schema error (say a non-integer `max-instance`) should not hide
the other problems of the file. Fields the schema rejects are dropped from a
copy of the input, the rest is parsed, and the semantic checks run on what is
left; the user sees both kinds of problems in one list, under their spelling.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from edl import __version__
from edl.api.errors import JobValidationError, Problem, join_path
from edl.api.k8snames import is_extended_resource
from edl.api.names import ROLE_MASTER, ROLE_PSERVER, ROLE_TRAINER, child_name
from edl.api.quantity import parse_quantity
from edl.api.resources import GPU, GPU_LEGACY
from edl.api.trainingjob import (
    API_VERSIONS,
    ResourceRequirements,
    TrainingJob,
    schema_errors,
    user_parts,
)
from edl.jobparser.collective import (
    COLLECTIVE,
    collective_defaults,
    collective_problems,
    entrypoint_problems,
)
from edl.jobparser.manifests import ETCD_DATA_VOLUME, ETCD_IMAGE
from edl.jobparser.podchecks import pod_option_problems
from edl.jobparser.statevolumes import state_volume_problems

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_PASSES",
    "DEFAULT_PORT",
    "DEFAULT_PORTS_NUM",
    "DEFAULT_PORTS_NUM_FOR_SPARSE",
    "ETCD_ENDPOINTS_PATTERN",
    "INT32_MAX",
    "INT_BOUNDS",
    "MAX_INSTANCES",
    "MAX_PASSES",
    "MAX_PORT",
    "ROLE_SUFFIXES",
    "PodDefaults",
    "validate_job",
]

DEFAULT_PORT = 7164
DEFAULT_PORTS_NUM = 1
DEFAULT_PORTS_NUM_FOR_SPARSE = 1
DEFAULT_PASSES = 1
# the runtime image deploy/Dockerfile.runtime builds, tagged with the package version:
# the one name used by the CRD default, the examples and the docs
RUNTIME_IMAGE_REPOSITORY = "ghcr.io/edl-dev/edl-runtime"
DEFAULT_IMAGE = f"{RUNTIME_IMAGE_REPOSITORY}:{__version__}"
DEFAULT_PSERVERS = 1

ROLE_SUFFIXES = tuple(child_name("", role) for role in (ROLE_TRAINER, ROLE_PSERVER, ROLE_MASTER))
MAX_NAME_LENGTH = 63  # a Kubernetes object name that is also a label value / DNS label
_LONGEST_SUFFIX = max(ROLE_SUFFIXES, key=len)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ETCD_URL_TEXT = r"https?://[^\s/,]+(:[0-9]{1,5})?/?"
_ETCD_URL = re.compile(rf"^{_ETCD_URL_TEXT}$")
# The whole spec.master.etcd-endpoint value: what `_etcd_problems` accepts, as one
# regular expression the CRD schema can carry.
ETCD_ENDPOINTS_PATTERN = rf"^\s*{_ETCD_URL_TEXT}(\s*,\s*{_ETCD_URL_TEXT})*\s*$"
MAX_PORT = 65535
INT32_MAX = 2**31 - 1  # Kubernetes' int32 fields: parallelism, replicas, backoffLimit, ports
# Sensible maxima, far below int32 so derived fields stay in range (backoffLimit is
# 2 x max-instance): Kubernetes supports 150,000 pods per cluster, and 10,000 trainers
# or pservers of one job, or a million passes, is already more than any real job asks.
MAX_INSTANCES = 10_000
MAX_PASSES = 1_000_000
# [minimum, maximum] of every integer field, dot-joined original spellings. One table
# for JobParser.validate and the CRD (edl.kube.crd), so both reject the same values.
MAX_BATCH = 2**24  # samples in one step of one job: far beyond any batch trained with
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "spec.port": (1, MAX_PORT),
    "spec.ports_num": (1, MAX_PORT),
    "spec.ports_num_for_sparse": (0, MAX_PORT),
    "spec.passes": (1, MAX_PASSES),
    "spec.trainer.min-instance": (1, MAX_INSTANCES),
    "spec.trainer.max-instance": (1, MAX_INSTANCES),
    "spec.pserver.min-instance": (1, MAX_INSTANCES),
    "spec.pserver.max-instance": (1, MAX_INSTANCES),
    "spec.batch.initial": (1, MAX_BATCH),
    "spec.batch.max": (1, MAX_BATCH),
    "spec.batch.per-trainer-max": (1, MAX_BATCH),
}

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class PodDefaults:
    """What a job gets when it does not say: set per controller (`edl controller --image ...`).

    ``trainer_priority_class``: the trainers' PriorityClass (None: no class, priority 0);
    the shipped controller Deployment names deploy/priorityclass.yaml's, which must exist
    (the API server refuses a pod naming a missing class).
    """

    image: str = DEFAULT_IMAGE
    etcd_image: str = ETCD_IMAGE
    trainer_priority_class: str | None = None


def validate_job(
    job: TrainingJob | Mapping[str, Any], defaults: PodDefaults | None = None
) -> TrainingJob:
    """Return the job with defaults filled; raise JobValidationError listing every problem."""
    data: Any = job.to_dict() if isinstance(job, TrainingJob) else job
    if not isinstance(data, Mapping):
        TrainingJob.from_dict(data)  # raises the "must be a mapping" problem
    parsed, problems = _parse_salvaging(data)
    reported = {path for path, _ in problems}
    for loc, message in _semantic_problems(parsed):
        path = join_path(user_parts(loc, data))
        if path not in reported:
            problems.append((path, message))
            reported.add(path)
    if problems:
        raise JobValidationError(problems)
    return _with_defaults(parsed, defaults or PodDefaults())


# -- schema pass with salvage ---------------------------------------------------------------


def _parse_salvaging(data: Mapping[str, Any]) -> tuple[TrainingJob, list[Problem]]:
    """Parse; on schema errors, drop the offending fields and parse the rest."""
    problems: list[Problem] = []
    work: dict[str, Any] = copy.deepcopy(dict(data))
    for _ in range(20):  # each round drops at least one field; nested errors settle fast
        try:
            return TrainingJob.model_validate(work), problems
        except ValidationError as error:
            errors = schema_errors(error, work)
        for parts, message in errors:
            problem = (join_path(parts), message)
            if problem not in problems and not _dropped_earlier(problem, problems):
                problems.append(problem)
            _drop(work, parts)
    # Unreachable in practice; fall back to an empty job so the caller still reports.
    return TrainingJob(apiVersion="edl.dev/v1", kind="TrainingJob"), problems


def _dropped_earlier(problem: Problem, problems: list[Problem]) -> bool:
    """A field "required" only because an earlier round dropped the list holding a bad item."""
    path, message = problem
    return message == "required" and any(
        earlier.startswith((f"{path}.", f"{path}[")) for earlier, _ in problems
    )


def _drop(work: dict[str, Any], parts: list[str | int]) -> None:
    """Remove the value at `parts` (or the list holding it), or patch a missing apiVersion/kind."""
    if parts in (["apiVersion"], ["kind"]):
        work[str(parts[0])] = API_VERSIONS[0] if parts == ["apiVersion"] else "TrainingJob"
        return
    node: Any = work
    parent: dict[str, Any] | None = None
    parent_key = ""
    for index, key in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(node, dict) and isinstance(key, str) and key in node:
            child = node[key]
            if last or isinstance(child, list) or not isinstance(child, dict):
                del node[key]  # drop lists whole: dropping an item would shift later indexes
                return
            parent, parent_key, node = node, key, child
        else:
            if last and parent is not None and isinstance(node, dict):
                del parent[parent_key]  # a required field is missing: drop its object
            return


# -- semantic checks -----------------------------------------------------------------------


def _semantic_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    yield from _name_problems(job)
    yield from _bound_problems(job)
    yield from _instance_problems(job)
    yield from _port_problems(job)
    trainer = job.spec.trainer
    if trainer.entrypoint is None:
        yield ("spec", "trainer", "entrypoint"), "required"
    elif not trainer.entrypoint.strip():
        yield ("spec", "trainer", "entrypoint"), "must not be empty"
    else:
        yield from entrypoint_problems(job)
    if job.spec.image is not None and not job.spec.image.strip():
        yield ("spec", "image"), "must not be empty (leave it out for the default image)"
    for role in ("trainer", "pserver", "master"):
        resources = getattr(job.spec, role).resources
        yield from _resource_problems(("spec", role, "resources"), resources)
    yield from _etcd_problems(job)
    yield from _volume_problems(job)
    yield from state_volume_problems(job)
    yield from pod_option_problems(job)
    yield from collective_problems(job)
    yield from _batch_problems(job)


def _batch_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    batch = job.spec.batch
    if batch is None:
        return
    if batch.initial is None:
        yield ("spec", "batch", "initial"), "required when spec.batch is given"
    elif batch.max is not None and batch.max < batch.initial:
        yield ("spec", "batch", "max"), f"must be >= initial ({batch.initial})"


def _name_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    name = job.metadata.name
    if not name:
        yield ("metadata", "name"), "required"
        return
    if not _DNS1123_LABEL.match(name):
        yield (
            ("metadata", "name"),
            f"must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit (got {name!r})",
        )
    elif not name[0].isalpha():
        yield (
            ("metadata", "name"),
            f"must start with a letter: the master Service '{name}-master' must be a DNS-1035 "
            f"label (got {name!r})",
        )
    limit = MAX_NAME_LENGTH - len(_LONGEST_SUFFIX)
    if len(name) > limit:
        yield (
            ("metadata", "name"),
            f"must be at most {limit} characters so that '{name}{_LONGEST_SUFFIX}' fits "
            f"Kubernetes' {MAX_NAME_LENGTH}-character limit (got {len(name)})",
        )
    namespace = job.metadata.namespace
    if namespace is not None and not _DNS1123_LABEL.match(namespace):
        yield ("metadata", "namespace"), f"must be a DNS-1123 label (got {namespace!r})"


def bound_problem(path: str, value: int) -> str | None:
    """Why `value` is out of `INT_BOUNDS[path]`, or None when it is in range."""
    low, high = INT_BOUNDS[path]
    if low <= value <= high:
        return None
    if path == "spec.port":
        return f"must be between {low} and {high} (got {value})"
    return f"must be >= {low} (got {value})" if value < low else f"must be <= {high} (got {value})"


def _bound_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    for path in INT_BOUNDS:
        node: Any = job
        for key in path.split("."):
            node = getattr(node, key.replace("-", "_"), None)
        if isinstance(node, int) and (problem := bound_problem(path, node)):
            yield tuple(path.split(".")), problem


def _instance_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    trainer, pserver = job.spec.trainer, job.spec.pserver
    if trainer.min_instance is None:
        yield ("spec", "trainer", "min-instance"), "required"
    yield from _min_max_problems(
        "trainer", trainer.min_instance, trainer.max_instance, job.spec.fault_tolerant is True
    )
    if job.spec.mode != COLLECTIVE:  # a collective job has no pservers
        yield from _min_max_problems("pserver", pserver.min_instance, pserver.max_instance, True)


def _min_max_problems(
    role: str, minimum: int | None, maximum: int | None, fault_tolerant: bool
) -> Iterator[tuple[Loc, str]]:
    if maximum is None or maximum < 1:  # out of range: _bound_problems names it
        return
    if minimum is not None and maximum < minimum:
        yield ("spec", role, "max-instance"), f"must be >= min-instance ({minimum})"
    elif minimum is not None and not fault_tolerant and maximum != minimum:
        yield (
            ("spec", role, "max-instance"),
            f"must equal min-instance ({minimum}) unless spec.fault_tolerant is true",
        )


def _port_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    spec = job.spec
    port = spec.port if spec.port is not None else DEFAULT_PORT
    ports_num = spec.ports_num if spec.ports_num is not None else DEFAULT_PORTS_NUM
    sparse = spec.ports_num_for_sparse
    sparse = sparse if sparse is not None else DEFAULT_PORTS_NUM_FOR_SPARSE
    ok = not any(
        bound_problem(f"spec.{name}", value)
        for name, value in
        (("port", port), ("ports_num", ports_num), ("ports_num_for_sparse", sparse))
    )  # each out-of-range value is named by _bound_problems
    last = port + ports_num + sparse - 1
    if ok and last > MAX_PORT and spec.mode != COLLECTIVE:
        yield (
            ("spec", "port"),
            f"port + ports_num + ports_num_for_sparse - 1 must be <= {MAX_PORT}: the pserver "
            f"ports {port}..{last} do not fit",
        )


def _resource_problems(loc: Loc, resources: ResourceRequirements) -> Iterator[tuple[Loc, str]]:
    limits = {k: parse_quantity(v) for k, v in (resources.limits or {}).items()}
    requests = {k: parse_quantity(v) for k, v in (resources.requests or {}).items()}
    for kind, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            if _counted(name) and value.denominator != 1:
                unit = "GPUs" if name.endswith(("/gpu", "-gpu")) else "units (an extended resource)"
                yield (*loc, kind, name), f"must be a whole number of {unit} (got {value})"
        if GPU in values and GPU_LEGACY in values:
            yield (*loc, kind, GPU_LEGACY), f"set only one of {GPU} and {GPU_LEGACY}"
    for name, requested in requests.items():
        if name not in limits:
            continue
        limit_text = (resources.limits or {})[name]
        if _counted(name) and requested != limits[name]:
            yield (*loc, "requests", name), f"must equal limits[{name}] ({limit_text})"
        elif requested > limits[name]:
            limit_path = join_path(["limits", name])
            yield (*loc, "requests", name), f"must be <= {limit_path} ({limit_text})"


def _counted(name: str) -> bool:
    """Extended resources (GPUs of any vendor, ...) come in whole units, request = limit."""
    return name == GPU_LEGACY or is_extended_resource(name)


def _etcd_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    endpoint = job.spec.master.etcd_endpoint
    if endpoint is None:
        return
    urls = [u.strip() for u in endpoint.split(",")]
    bad = [u for u in urls if not _ETCD_URL.match(u)]
    if not endpoint.strip() or bad:
        yield (
            ("spec", "master", "etcd-endpoint"),
            f"must be comma-separated http(s)://host:port URLs (got {endpoint!r})",
        )


def _volume_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    names = {v["name"] for v in job.spec.volumes or [] if isinstance(v.get("name"), str)}
    for index, volume in enumerate(job.spec.volumes or []):
        if not isinstance(volume.get("name"), str) or not volume["name"]:
            yield ("spec", "volumes", index, "name"), "required"
        elif volume["name"] == ETCD_DATA_VOLUME:
            yield ("spec", "volumes", index, "name"), f"{ETCD_DATA_VOLUME!r} is reserved for etcd"
    for index, mount in enumerate(job.spec.volume_mounts or []):
        name = mount.get("name")
        if not isinstance(name, str) or not name:
            yield ("spec", "volumeMounts", index, "name"), "required"
        elif name not in names:
            yield (
                ("spec", "volumeMounts", index, "name"),
                f"no volume named {name!r} in spec.volumes",
            )
        if not isinstance(mount.get("mountPath"), str) or not mount["mountPath"]:
            yield ("spec", "volumeMounts", index, "mountPath"), "required"


# -- defaults ------------------------------------------------------------------------------


def _with_defaults(job: TrainingJob, defaults: PodDefaults) -> TrainingJob:
    """The job with the original's defaults written in (so `to_dict()` shows them).

    Both modes share the image, port, trainer and master defaults; a collective job
    gets no pserver, pass or pserver-port fields at all.
    """
    data = job.to_dict()
    spec = data.setdefault("spec", {})
    spec.setdefault("image", defaults.image)
    spec.setdefault("port", DEFAULT_PORT)
    spec.setdefault("fault_tolerant", False)
    spec.setdefault("hostNetwork", False)
    trainer = spec.setdefault("trainer", {})
    trainer.setdefault("workspace", "")
    trainer.setdefault("max-instance", trainer["min-instance"])
    if defaults.trainer_priority_class:
        trainer.setdefault("priorityClassName", defaults.trainer_priority_class)
    master = spec.setdefault("master", {})
    if not master.get("etcd-endpoint"):
        master.setdefault("etcd-image", defaults.etcd_image)
    if spec.get("mode") == COLLECTIVE:
        collective_defaults(spec)
        return TrainingJob.from_dict(data)
    spec.setdefault("ports_num", DEFAULT_PORTS_NUM)
    spec.setdefault("ports_num_for_sparse", DEFAULT_PORTS_NUM_FOR_SPARSE)
    spec.setdefault("passes", DEFAULT_PASSES)
    pserver = spec.setdefault("pserver", {})
    pserver.setdefault("min-instance", DEFAULT_PSERVERS)
    pserver.setdefault("max-instance", pserver["min-instance"])
    return TrainingJob.from_dict(data)

"""The TrainingJob resource (`edl.dev/v1`, and the original `paddlepaddle.org/v1`).

Field names follow the original job files (`min-instance`, `ports_num`,
`etcd-endpoint`, ...) so those files load unchanged; Python code uses
snake_case attributes (`job.spec.trainer.min_instance`). Optional fields stay
`None` until `JobParser.validate` fills the defaults, so `to_dict()` gives back
what the user wrote. Unknown fields are rejected everywhere except `metadata`
(a Kubernetes ObjectMeta) and `status` (written by the controller), whose
other fields are kept as given.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from annotated_types import MaxLen
from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from edl.api.errors import (
    JobValidationError,
    Problem,
    describe_input,
    join_path,
    plain_message,
)
from edl.api.k8smodel import K8sObject
from edl.api.k8snames import resource_name_problem
from edl.api.podoptions import PodOptions
from edl.api.quantity import QuantityError, parse_quantity
from edl.api.resources import gpu_of

__all__ = [
    "API_GROUPS",
    "API_VERSIONS",
    "CollectiveSpec",
    "MasterSpec",
    "ObjectMeta",
    "PserverSpec",
    "ResourceRequirements",
    "TrainerSpec",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
]

API_VERSIONS = ("edl.dev/v1", "paddlepaddle.org/v1")
API_GROUPS = tuple(v.split("/")[0] for v in API_VERSIONS)
KIND = "TrainingJob"


def _quantity_text(value: Any) -> str:
    """Accept a quantity as YAML gives it (text, int or float); keep it as text."""
    if isinstance(value, Mapping | list):
        raise ValueError(f"must be a quantity such as 500m or 1Gi, not {describe_input(value)}")
    try:
        parsed = parse_quantity(value)
    except QuantityError:
        raise ValueError(f"invalid quantity {describe_input(value)}") from None
    if parsed < 0:
        raise ValueError(f"must not be negative (got {describe_input(value)})")
    return (
        value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    )


QuantityText = Annotated[str, BeforeValidator(_quantity_text)]


def _empty_if_none(value: Any) -> Any:
    """`master:` with nothing under it is YAML null; treat it as an empty section."""
    return {} if value is None else value


EmptyIfNone = BeforeValidator(_empty_if_none)
# Every integer of a TrainingJob is an int32 on the API server (replicas, parallelism,
# ports); JobParser.validate applies the tighter per-field bounds (INT_BOUNDS).
Int32 = Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)]


def _resource_name(value: Any) -> Any:
    problem = resource_name_problem(value) if isinstance(value, str) else None
    if problem:
        raise ValueError(problem)
    return value


MAX_RESOURCES = 32
ResourceName = Annotated[StrictStr, AfterValidator(_resource_name)]
ResourceListModel = Annotated[dict[ResourceName, QuantityText], MaxLen(MAX_RESOURCES)]


class _Strict(BaseModel):
    """Base: unknown fields are errors; original spellings and snake_case both accepted."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ResourceRequirements(_Strict):
    """A container's `resources`: limits and requests as quantity texts."""

    limits: ResourceListModel | None = Field(
        default=None, description="Most a container may use: cpu, memory, nvidia.com/gpu "
        "(quantities such as 1, 500m, 1Gi). A GPU limit is what the autoscaler counts.")
    requests: ResourceListModel | None = Field(
        default=None, description="What the scheduler reserves for a container (quantities); "
        "the autoscaler plans with these.")


class ObjectMeta(BaseModel):
    """The parts of metadata edl reads; every other ObjectMeta field is kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: StrictStr | None = None
    namespace: StrictStr | None = None
    uid: StrictStr | None = None
    labels: dict[str, StrictStr] | None = None
    annotations: dict[str, StrictStr] | None = None


class TrainerSpec(PodOptions):
    """`spec.trainer`: what each trainer runs, how many may run, and its pods' fields."""

    entrypoint: StrictStr | None = Field(
        default=None, description="The command each trainer runs in its workspace, e.g. "
        "`python train.py` ($(VAR) expands the pod's environment, as Kubernetes does).")
    workspace: StrictStr | None = Field(default=None, description="The directory the "
        "entrypoint runs in, in the image (examples: /home/edl/examples/NAME); empty: the cwd.")
    min_instance: Int32 | None = Field(
        default=None, alias="min-instance",
        description="Trainers the job is guaranteed: the autoscaler never goes below it. "
        "`kubectl scale tj NAME --replicas=N` sets this field.")
    max_instance: Int32 | None = Field(
        default=None, alias="max-instance",
        description="Most trainers the autoscaler gives the job when the cluster has room "
        "(default: min-instance). Above min-instance only when fault_tolerant.")
    resources: Annotated[ResourceRequirements, EmptyIfNone] = Field(
        default_factory=ResourceRequirements,
        description="Requests and limits of each trainer pod.",
    )


class PserverSpec(PodOptions):
    """`spec.pserver`: parameter servers (not scaled; replicas = min-instance) and their pods."""

    min_instance: Int32 | None = Field(
        default=None, alias="min-instance",
        description="Parameter servers the job runs (default 1); each holds one shard.")
    max_instance: Int32 | None = Field(
        default=None, alias="max-instance",
        description="Kept for the original API: pservers are not scaled (default: "
        "min-instance; must not be below it).")
    checkpoint_volume: StrictStr | None = Field(
        default=None, alias="checkpoint-volume",
        description="A volume of spec.volumes (e.g. a PersistentVolumeClaim) the pservers "
        "checkpoint to (EDL_CHECKPOINT_DIR), so a replaced pserver pod restores its shard.")
    resources: Annotated[ResourceRequirements, EmptyIfNone] = Field(
        default_factory=ResourceRequirements,
        description="Requests and limits of each pserver pod.",
    )


class MasterSpec(PodOptions):
    """`spec.master`: the task master; an external etcd replaces the built-in sidecar."""

    etcd_endpoint: StrictStr | None = Field(
        default=None, alias="etcd-endpoint",
        description="An external etcd (comma-separated http(s)://host[:port] URLs) instead of "
        "the etcd sidecar in the master pod.")
    etcd_image: StrictStr | None = Field(
        default=None, alias="etcd-image",
        validation_alias=AliasChoices("etcd-image", "etcdImage", "etcd_image"),
        description="The image of the master pod's etcd sidecar (default: `edl controller "
                    "--etcd-image`, quay.io/coreos/etcd).")
    etcd_volume: StrictStr | None = Field(
        default=None, alias="etcd-volume",
        description="A volume of spec.volumes (e.g. a PersistentVolumeClaim) the etcd sidecar "
        "keeps its data on, so a replaced master pod resumes the task queue (default: an "
        "emptyDir, lost with the pod).")
    resources: Annotated[ResourceRequirements, EmptyIfNone] = Field(
        default_factory=ResourceRequirements,
        description="Requests and limits of the master pod's master container.",
    )


class CollectiveSpec(_Strict):
    """`spec.collective`: trainers are nodes of torch's elastic agent (fields: see each)."""

    nproc_per_node: StrictInt | None = Field(
        default=None, alias="nproc-per-node",
        description="Worker processes per trainer pod (torchrun's --nproc-per-node).")
    world_sizes: list[StrictInt] | None = Field(
        default=None, alias="world-sizes",
        description="The only trainer counts the autoscaler may choose (e.g. [1, 2, 4]).")
    world_size_multiple: StrictInt | None = Field(
        default=None, alias="world-size-multiple",
        description="Trainer counts must be a multiple of this (instead of world-sizes).")
    resize_cooldown: StrictInt | None = Field(
        default=None, alias="resize-cooldown",
        description="Seconds between two resizes (default 60, or 5 with live: a restart "
        "re-runs every worker from its last checkpoint, a live resize re-forms the world).")
    max_restarts: StrictInt | None = Field(
        default=None, alias="max-restarts",
        description="Rendezvous rounds (restarts) allowed before the job fails.")
    live: StrictBool | None = Field(
        default=None,
        description="The script trains through edl.elastic: a resize re-forms the world "
        "inside the living workers (about a second) instead of restarting them.")


class BatchSpec(_Strict):
    """`spec.batch`: the job adapts its total batch (and learning rate) to its trainers."""

    initial: Int32 | None = Field(default=None, description="Total batch at min-instance "
        "trainers; its per-trainer share is the batch when no policy adapts it.")
    max: Int32 | None = Field(default=None, description="Largest total batch a policy may set.")
    per_trainer_max: Int32 | None = Field(default=None, alias="per-trainer-max",
                                          description="Largest batch per trainer (memory).")


class TrainingJobSpec(_Strict):
    """`spec`: every field of the original TrainingJobSpec, original spellings as aliases."""

    # `parameter-server` (the original's, the default) or `collective` (torch's elastic agent)
    mode: Literal["parameter-server", "collective"] | None = Field(default=None, description=
        "parameter-server (default: master, pservers, trainers using the edl trainer API) or "
        "collective (a PyTorch DDP script under torch's elastic agent; no pservers).")
    collective: CollectiveSpec | None = Field(default=None, description="A collective job's "
        "rendezvous and resizes (world size = trainers x nproc-per-node; a resize restarts "
        "every worker, so it happens at most once per resize-cooldown).")
    batch: BatchSpec | None = Field(default=None, description="The job adapts its total "
        "batch (and learning rate) to its trainers; without it the script chooses.")
    image: StrictStr | None = Field(default=None, description="The container image of "
        "every pod of the job (default: the edl runtime image of this version).")
    port: Int32 | None = Field(default=None, description="First master/pserver port (7164).")
    ports_num: Int32 | None = Field(
        default=None, description="Dense-parameter ports per pserver, from port on (default 1).")
    ports_num_for_sparse: Int32 | None = Field(
        default=None, description="Sparse-parameter ports per pserver, after the dense ones "
        "(default 1; 0 for none).")
    fault_tolerant: StrictBool | None = Field(
        default=None, description="Whether trainers may come and go while the job runs; only "
        "a fault-tolerant job is elastic (max-instance above min-instance). Default false.")
    passes: Int32 | None = Field(default=None, description="Passes over the data (default 1).")
    volumes: list[dict[str, Any]] | None = Field(
        default=None, description="Pod volumes (core/v1 Volume) added to every pod of the job "
        "(one named by etcd-volume or checkpoint-volume only to the pods writing on it).")
    volume_mounts: list[dict[str, Any]] | None = Field(
        default=None,
        validation_alias=AliasChoices("volumeMounts", "VolumeMounts", "volume_mounts"),
        serialization_alias="volumeMounts",
        description="Mounts (core/v1 VolumeMount) of the volumes in every container.",
    )
    image_pull_secrets: list[dict[str, Any]] | None = Field(
        default=None, alias="imagePullSecrets",
        description="Secrets (core/v1 LocalObjectReference) for pulling the image.")
    host_network: StrictBool | None = Field(
        default=None, alias="hostNetwork",
        description="Run the job's pods in the node's network namespace (default false).")
    master: Annotated[MasterSpec, EmptyIfNone] = Field(
        default_factory=MasterSpec,
        description="The master: the task queue (and its etcd) of the job.")
    pserver: Annotated[PserverSpec, EmptyIfNone] = Field(
        default_factory=PserverSpec,
        description="Parameter servers (parameter-server mode only).")
    trainer: Annotated[TrainerSpec, EmptyIfNone] = Field(
        default_factory=TrainerSpec,
        description="What each trainer runs and how many may run.")


class TrainingJobStatus(_Strict):
    """`status`: the job's phase and a human-readable reason.

    The controller owns status and may add bookkeeping (conditions, replicas for
    the scale subresource, trainer counts), so other status fields are kept as given.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    state: Literal["Created", "Running", "Failed", "Succeeded"] | None = Field(
        default=None, description="The job's phase: Created, Running, Failed or Succeeded.")
    message: StrictStr | None = Field(
        default=None, description="Why the job is in its state, in words: what it waits for, "
        "or every problem that failed it.")


class TrainingJob(_Strict):
    """A TrainingJob object: elastic trainers, parameter servers and a master."""

    api_version: Literal["edl.dev/v1", "paddlepaddle.org/v1"] = Field(
        alias="apiVersion",
        description="edl.dev/v1 (a cluster serves only this) or the original "
        "paddlepaddle.org/v1, which edl run and edl validate read.")
    kind: Literal["TrainingJob"] = Field(description="TrainingJob.")
    metadata: Annotated[ObjectMeta, EmptyIfNone] = Field(default_factory=ObjectMeta)
    spec: Annotated[TrainingJobSpec, EmptyIfNone] = Field(
        default_factory=TrainingJobSpec,
        description="What to run: image, ports, trainers, pservers and master.")
    status: TrainingJobStatus | None = Field(default=None, description="Written by the controller.")

    # -- the original's methods ---------------------------------------------------------

    def elastic(self) -> bool:
        """True when the trainer count may change (min-instance < max-instance)."""
        trainer = self.spec.trainer
        if trainer.min_instance is None or trainer.max_instance is None:
            return False
        return trainer.min_instance < trainer.max_instance

    def collective(self) -> bool:
        """True for a collective job: trainers run the entrypoint under torch's elastic agent."""
        return self.spec.mode == "collective"

    def gpu(self) -> int:
        """GPUs each trainer is limited to, under either GPU resource name."""
        return gpu_of(self.spec.trainer.resources.limits)

    def need_gpu(self) -> bool:
        """True when trainers ask for at least one GPU."""
        return self.gpu() > 0

    # -- conversion ---------------------------------------------------------------------

    @classmethod
    def from_dict(cls, obj: Any) -> TrainingJob:
        """Build from a plain dict (YAML/JSON); every schema problem raised at once."""
        if not isinstance(obj, Mapping):
            raise JobValidationError(
                [("", f"a TrainingJob must be a mapping, not {describe_input(obj)}")]
            )
        try:
            return cls.model_validate(dict(obj))
        except ValidationError as error:
            raise JobValidationError(schema_problems(error, obj)) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data with the original field spellings; unset fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


# -- pydantic errors -> (path, message) in the user's spelling ----------------------------


def _spellings() -> dict[str, tuple[str, ...]]:
    """Every accepted spelling of a field, keyed by each of its spellings."""
    table: dict[str, tuple[str, ...]] = {}
    models: list[type[BaseModel]] = [
        TrainingJob,
        TrainingJobSpec,
        CollectiveSpec,
        TrainerSpec,
        PserverSpec,
        MasterSpec,
        TrainingJobStatus,
        *_k8s_models(),
    ]
    for model in models:
        for name, field in model.model_fields.items():
            names: list[str] = [name]
            if field.alias:
                names.append(field.alias)
            if isinstance(field.validation_alias, AliasChoices):
                names += [c for c in field.validation_alias.choices if isinstance(c, str)]
            for spelling in names:
                table[spelling] = tuple(dict.fromkeys(names))
    return table


def _k8s_models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    pending: list[type[BaseModel]] = [K8sObject]
    while pending:
        model = pending.pop()
        found.append(model)
        pending.extend(model.__subclasses__())
    return found


FIELD_SPELLINGS = _spellings()


def user_parts(loc: tuple[str | int, ...], data: Any) -> list[str | int]:
    """Rewrite a field location (canonical spellings) with the keys the user actually wrote."""
    parts: list[str | int] = []
    node = data
    for key in loc:
        if isinstance(node, Mapping) and isinstance(key, str) and key not in node:
            written = [s for s in FIELD_SPELLINGS.get(key, ()) if s in node]
            key = written[0] if written else key
        parts.append(key)
        if isinstance(node, Mapping):
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            node = None
    return parts


def _message(error: Mapping[str, Any]) -> str:
    return plain_message(error)


def schema_errors(error: ValidationError, data: Any) -> list[tuple[list[str | int], str]]:
    """Every pydantic error as (location in the user's keys, readable message), no repeats."""
    found: list[tuple[list[str | int], str]] = []
    for item in error.errors(include_url=False):
        loc = tuple(part for part in item["loc"] if not _is_union_tag(part))
        message = _message(item)
        if item["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            close = difflib.get_close_matches(loc[-1], FIELD_SPELLINGS, n=1, cutoff=0.75)
            message += f" (did you mean {close[0]!r}?)" if close else ""
        entry = (user_parts(loc, data), message)
        if entry not in found:
            found.append(entry)
    return found


def schema_problems(error: ValidationError, data: Any) -> list[Problem]:
    """Every pydantic error as (user's field path, readable message)."""
    return [(join_path(parts), message) for parts, message in schema_errors(error, data)]


def _is_union_tag(part: str | int) -> bool:
    """pydantic adds type names (`str`, `function-before[...]`) to locations inside unions."""
    return isinstance(part, str) and (
        part in {"[key]", "str", "int", "bool", "list[dict[str,any]]", "dict[str,str]", "none"}
        or part.startswith(("function-", "literal["))
    )

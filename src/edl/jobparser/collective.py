"""Collective TrainingJobs (`spec.mode: collective`): their rules, defaults and allowed sizes.

A collective job runs an unmodified PyTorch DDP script under torch's elastic
agent: no pservers and no task master. Each trainer pod is one agent node with
`nproc-per-node` workers, so the world size is trainers x nproc-per-node. The
spec may restrict the world sizes a resize may pick (`world-sizes`, or
`world-size-multiple`), because a script's batch size or model sharding often
only works for some of them.

Pure: plain data in, plain data out (the parser stays below the runtime).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from edl.api.trainingjob import CollectiveSpec, TrainingJob

__all__ = [
    "COLLECTIVE",
    "DEFAULT_LIVE_RESIZE_COOLDOWN_S",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_NPROC_PER_NODE",
    "DEFAULT_RESIZE_COOLDOWN_S",
    "LIVE_RESIZE_PAUSE_S",
    "PS_ONLY_FIELDS",
    "RESTART_RESIZE_PAUSE_S",
    "allowed_trainer_counts",
    "collective_defaults",
    "collective_problems",
    "job_allowed_counts",
    "resize_cooldown_s",
    "resize_pause_s",
]

COLLECTIVE = "collective"
DEFAULT_NPROC_PER_NODE = 1
DEFAULT_RESIZE_COOLDOWN_S = 60
# A resize's pause of the whole world, measured on the shared 2-core machine
# (decision -> first step of the new world, medians): a restart re-launches every
# worker and reloads the checkpoint (18 s at load 6-12 by bench/collective.py; 19-59 s
# at load 9-23 by bench/collective_live.py); a live resize re-forms the process group
# inside the workers (0.12-0.20 s planned, 1.5 s after a SIGKILL, bench/collective_live.py).
# The goodput policy prices a resize with it.
RESTART_RESIZE_PAUSE_S = 18.0
LIVE_RESIZE_PAUSE_S = 1.0
# live: at most one resize per this many seconds by default (a few pauses' worth)
DEFAULT_LIVE_RESIZE_COOLDOWN_S = 5
DEFAULT_MAX_RESTARTS = 100
# spec fields that only mean something with pservers and a task master, with the
# default a collective job may carry anyway (the CRD's defaulting fills them in on
# Kubernetes); None: any value is an error
PS_ONLY_FIELDS: dict[str, int | None] = {
    "pserver": None, "passes": 1, "ports_num": 1, "ports_num_for_sparse": 1,
}

Loc = tuple[str | int, ...]


def allowed_trainer_counts(
    minimum: int,
    maximum: int,
    nproc_per_node: int = 1,
    world_sizes: Sequence[int] | None = None,
    world_size_multiple: int | None = None,
) -> tuple[int, ...]:
    """Trainer counts in [minimum, maximum] whose world size the spec allows, ascending."""
    allowed = set(world_sizes) if world_sizes else None
    counts = []
    for trainers in range(max(1, minimum), maximum + 1):
        world = trainers * nproc_per_node
        if allowed is not None and world not in allowed:
            continue
        if world_size_multiple and world % world_size_multiple:
            continue
        counts.append(trainers)
    return tuple(counts)


def job_allowed_counts(job: TrainingJob) -> tuple[int, ...]:
    """The trainer counts a (validated) collective job may run with."""
    spec = job.spec.collective or CollectiveSpec()
    return allowed_trainer_counts(
        int(job.spec.trainer.min_instance or 1),
        int(job.spec.trainer.max_instance or job.spec.trainer.min_instance or 1),
        spec.nproc_per_node or DEFAULT_NPROC_PER_NODE,
        spec.world_sizes,
        spec.world_size_multiple,
    )


def resize_cooldown_s(job: TrainingJob) -> float:
    """The job's cooldown between resizes: its own, else the default for its mode."""
    spec = job.spec.collective or CollectiveSpec()
    if spec.resize_cooldown is not None:
        return float(spec.resize_cooldown)
    return float(DEFAULT_LIVE_RESIZE_COOLDOWN_S if spec.live else DEFAULT_RESIZE_COOLDOWN_S)


def resize_pause_s(job: TrainingJob) -> float:
    """Seconds the whole world stops for one resize of this collective job."""
    spec = job.spec.collective or CollectiveSpec()
    return LIVE_RESIZE_PAUSE_S if spec.live else RESTART_RESIZE_PAUSE_S


def collective_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    """Every problem of the collective parts of a job (nothing for a valid or PS job)."""
    spec = job.spec
    if spec.mode != COLLECTIVE:
        if spec.collective is not None:
            yield ("spec", "collective"), "only for spec.mode: collective"
        return
    for name, harmless in PS_ONLY_FIELDS.items():
        if name in spec.model_fields_set and getattr(spec, name) != harmless:
            alias = type(spec).model_fields[name].alias or name
            yield (
                ("spec", alias),
                "only for parameter-server jobs: a collective job has no pservers or task "
                "master (remove it)",
            )
    collective = spec.collective or CollectiveSpec()
    nproc = collective.nproc_per_node
    if nproc is not None and nproc < 1:
        yield ("spec", "collective", "nproc-per-node"), f"must be >= 1 (got {nproc})"
        nproc = None
    nproc = nproc or DEFAULT_NPROC_PER_NODE
    for field, value in (
        ("resize-cooldown", collective.resize_cooldown),
        ("max-restarts", collective.max_restarts),
    ):
        if value is not None and value < 0:
            yield ("spec", "collective", field), f"must be >= 0 (got {value})"
    yield from _size_problems(collective, nproc)
    yield from _min_problems(job, collective, nproc)


CHECKPOINT_SUBDIR = "edl-checkpoints"
# edl sets these, but a job may choose them in spec.trainer.env (then edl uses that value)
USER_SETTABLE_ENV = frozenset({"EDL_CHECKPOINT_DIR"})
CHECKPOINT_FALLBACK = "/tmp"


def checkpoint_dir(job: TrainingJob) -> str:
    """A collective trainer's ``EDL_CHECKPOINT_DIR`` on Kubernetes (documented default).

    The value of ``EDL_CHECKPOINT_DIR`` in ``spec.trainer.env`` if it sets one, else
    ``<first spec.volumeMounts path>/edl-checkpoints/<job>``: any worker may become rank 0,
    so the checkpoint must be on a volume every trainer mounts; without one, a directory
    of the pod's own (``/tmp/edl-checkpoints/<job>``), which a replaced pod loses."""
    for variable in job.spec.trainer.env or []:
        if variable.name == "EDL_CHECKPOINT_DIR" and variable.value:
            return variable.value
    mounts = job.spec.volume_mounts or []
    base = next((str(m["mountPath"]) for m in mounts
                 if isinstance(m, dict) and m.get("mountPath")), CHECKPOINT_FALLBACK)
    return f"{base.rstrip('/')}/{CHECKPOINT_SUBDIR}/{job.metadata.name}"


# $(NAME) as Kubernetes expands it in a command or env value ($$ is a literal $)
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# the variables a trainer's entrypoint may name as $(NAME): a collective agent expands
# it with its whole environment (edl's and spec.trainer.env); a parameter-server
# trainer's is expanded by the kubelet with the variables listed before EDL_ENTRYPOINT
COLLECTIVE_ENV_NAMES = frozenset({
    "EDL_JOB_NAME", "EDL_NAMESPACE", "EDL_MODE", "EDL_TRAINERS", "EDL_TRAINERS_MAX",
    "EDL_NPROC_PER_NODE", "EDL_MAX_RESTARTS", "EDL_CHECKPOINT_DIR", "EDL_ENTRYPOINT",
    "EDL_WORKSPACE", "EDL_PORT", "EDL_RDZV_ENDPOINT", "EDL_USE_GPU", "EDL_ETCD_ENDPOINTS",
    "EDL_LIVE", "EDL_WORLD_SIZES", "EDL_POD_IP", "EDL_POD_NAME",
})
PS_ENTRYPOINT_ENV_NAMES = frozenset({
    "EDL_JOB_NAME", "EDL_NAMESPACE", "EDL_TRAINERS", "EDL_TRAINERS_MAX", "EDL_PSERVERS",
})


def entrypoint_problems(job: TrainingJob) -> Iterator[tuple[Loc, str]]:
    """A ``$(NAME)`` in the entrypoint that nothing defines: Kubernetes would leave it
    in the command as it is (``$(EDL_CHECKPOINT_DIR)/model.pt``, a relative path)."""
    entrypoint = job.spec.trainer.entrypoint or ""
    user = {v.name for v in job.spec.trainer.env or []}
    if job.spec.mode == COLLECTIVE:
        defined, where = COLLECTIVE_ENV_NAMES | user, "the trainer's environment"
    else:
        defined = PS_ENTRYPOINT_ENV_NAMES
        where = "the variables listed before EDL_ENTRYPOINT (the kubelet expands it)"
    for name in undefined_vars(entrypoint, defined):
        yield (("spec", "trainer", "entrypoint"),
               f"$({name}) is not defined in {where}, so it would stay in the command as "
               f"written (defined: {', '.join(sorted(defined))}; $$({name}) for a literal)")


def undefined_vars(text: str, defined: Sequence[str] | frozenset[str]) -> list[str]:
    """The ``$(NAME)`` references in ``text`` whose NAME is not in ``defined`` (in order)."""
    found: list[str] = []
    for match in _VAR.finditer(text):
        name = match.group(1)
        if name and name not in defined and name not in found:
            found.append(name)
    return found


def _size_problems(collective: CollectiveSpec, nproc: int) -> Iterator[tuple[Loc, str]]:
    sizes, multiple = collective.world_sizes, collective.world_size_multiple
    if sizes is not None and multiple is not None:
        yield (
            ("spec", "collective", "world-size-multiple"),
            "set either world-sizes or world-size-multiple, not both",
        )
    if sizes is not None:
        if not sizes:
            yield ("spec", "collective", "world-sizes"), "must list at least one world size"
        for index, size in enumerate(sizes):
            if size < 1:
                yield ("spec", "collective", "world-sizes", index), f"must be >= 1 (got {size})"
            elif size % nproc:
                yield (
                    ("spec", "collective", "world-sizes", index),
                    f"must be a multiple of nproc-per-node ({nproc}): each trainer runs "
                    f"{nproc} workers (got {size})",
                )
    if multiple is not None and multiple < 1:
        yield ("spec", "collective", "world-size-multiple"), f"must be >= 1 (got {multiple})"


def _min_problems(
    job: TrainingJob, collective: CollectiveSpec, nproc: int
) -> Iterator[tuple[Loc, str]]:
    """min-instance must itself give an allowed world size: the job starts with it."""
    trainer = job.spec.trainer
    minimum = trainer.min_instance
    if minimum is None or minimum < 1:
        return
    maximum = trainer.max_instance if trainer.max_instance is not None else minimum
    sizes = [s for s in collective.world_sizes or () if s >= 1 and s % nproc == 0]
    multiple = collective.world_size_multiple
    multiple = multiple if multiple is not None and multiple >= 1 else None
    if collective.world_sizes and not sizes:
        return  # the world sizes themselves are wrong; reported above
    if allowed_trainer_counts(minimum, minimum, nproc, sizes, multiple):
        return
    rule = (
        f"one of world-sizes {sorted(sizes)}" if sizes else f"a multiple of {multiple}"
    )
    counts = allowed_trainer_counts(minimum, max(maximum, minimum), nproc, sizes, multiple)
    hint = f"; allowed trainer counts up to max-instance: {list(counts)}" if counts else ""
    yield (
        ("spec", "trainer", "min-instance"),
        f"must give an allowed world size: {minimum} trainers x {nproc} workers = "
        f"{minimum * nproc} is not {rule}{hint}",
    )


def collective_defaults(spec: dict[str, Any]) -> None:
    """Fill a collective spec's defaults in place (plain data, original spellings)."""
    collective = spec.setdefault("collective", {})
    collective.setdefault("nproc-per-node", DEFAULT_NPROC_PER_NODE)
    collective.setdefault("live", False)
    collective.setdefault(
        "resize-cooldown",
        DEFAULT_LIVE_RESIZE_COOLDOWN_S if collective["live"] is True else DEFAULT_RESIZE_COOLDOWN_S,
    )
    collective.setdefault("max-restarts", DEFAULT_MAX_RESTARTS)

"""What `edl agent` runs: the torchrun command line for one trainer pod (pure).

One pod is one node of torch's elastic agent: ``--nnodes=min:max`` from the
job's trainer range, ``--rdzv-backend=edl`` (torch's c10d dynamic rendezvous on
the master pod's store, see `handler`), ``--rdzv-id`` unique per job, and the pod
IP as the address other nodes reach this one's workers at.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

# The name `handler` registers its rendezvous handler under with torch. Here, not in
# `handler`, so that `edl agent`, which only builds torchrun's command line and
# supervises it, does not import torch (about 2.5 CPU-seconds per trainer pod start):
# torch is imported by the torchrun process the agent starts.
BACKEND = "edl"

# Rendezvous timings: a new round waits `last_call` s for late joiners once min
# nodes are in; a node whose heartbeats (every `keep_alive_interval` s) stop for
# `keep_alive_max_attempt` intervals is dropped (a SIGKILLed pod, a lost node).
RDZV_CONF = {
    "join_timeout": 600,
    "last_call_timeout": 3,
    "close_timeout": 10,
    "keep_alive_interval": 2,
    "keep_alive_max_attempt": 4,
    "read_timeout": 60,
}
PYTHONS = ("python", "python3")
WORKER_MODULE = "edl.runtime.collective.worker"


class LaunchError(ValueError):
    """An EDL_* variable the agent cannot run with; names the variable."""


@dataclass(frozen=True)
class AgentConfig:
    job: str
    namespace: str
    entrypoint: str
    min_nodes: int
    max_nodes: int
    nproc_per_node: int = 1
    max_restarts: int = 100
    local_addr: str = "127.0.0.1"
    monitor_interval: float = 1.0


def config_from_env(env: Mapping[str, str]) -> AgentConfig:
    """Read the agent's EDL_* variables; every bad one named in one LaunchError."""
    problems: list[str] = []

    def integer(name: str, default: int | None, least: int) -> int:
        text = env.get(name)
        if text is None or text == "":
            if default is None:
                problems.append(f"{name}: required")
            return default if default is not None else least
        try:
            value = int(text)
        except ValueError:
            problems.append(f"{name}: must be an integer (got {text!r})")
            return least
        if value < least:
            problems.append(f"{name}: must be >= {least} (got {value})")
        return value

    minimum = integer("EDL_TRAINERS", None, 1)
    maximum = integer("EDL_TRAINERS_MAX", minimum, 1)
    if maximum < minimum:
        problems.append(f"EDL_TRAINERS_MAX: must be >= EDL_TRAINERS ({minimum})")
    nproc = integer("EDL_NPROC_PER_NODE", 1, 1)
    restarts = integer("EDL_MAX_RESTARTS", 100, 0)
    entrypoint = (env.get("EDL_ENTRYPOINT") or "").strip()
    if not entrypoint:
        problems.append("EDL_ENTRYPOINT: required (the TrainingJob's spec.trainer.entrypoint)")
    if problems:
        raise LaunchError("; ".join(problems))
    return AgentConfig(
        job=env.get("EDL_JOB_NAME") or "edl-job",
        namespace=env.get("EDL_NAMESPACE") or "default",
        entrypoint=expand(entrypoint, env),
        min_nodes=minimum,
        max_nodes=maximum,
        nproc_per_node=nproc,
        max_restarts=restarts,
        local_addr=env.get("EDL_POD_IP") or "127.0.0.1",
    )


def torchrun_args(config: AgentConfig, rdzv_endpoint: str, python: str = "python") -> list[str]:
    """torchrun's arguments (after ``torchrun``) for this pod; ``python``: the interpreter."""
    try:
        command = shlex.split(config.entrypoint)
    except ValueError as error:
        raise LaunchError(f"EDL_ENTRYPOINT: {error}") from None
    if not command:
        raise LaunchError("EDL_ENTRYPOINT: required")
    conf = ",".join(f"{key}={value}" for key, value in RDZV_CONF.items())
    args = [
        f"--nnodes={config.min_nodes}:{config.max_nodes}",
        f"--nproc-per-node={config.nproc_per_node}",
        f"--max-restarts={config.max_restarts}",
        f"--rdzv-backend={BACKEND}",
        f"--rdzv-endpoint={rdzv_endpoint}",
        f"--rdzv-id={config.namespace}-{config.job}",
        f"--rdzv-conf={conf}",
        f"--local-addr={config.local_addr}",
        f"--monitor-interval={config.monitor_interval:g}",
    ]
    if command[0] in PYTHONS:
        if len(command) < 2 or command[1].startswith("-"):
            raise LaunchError(
                f"EDL_ENTRYPOINT: 'python' must be followed by a script (got {config.entrypoint!r})"
            )
        command = [python, "-u", *command[1:]]
    # every worker through `worker`, which ties it to its agent before exec'ing the command
    return [*args, "--no-python", python, "-m", WORKER_MODULE, *command]


def missing_program(entrypoint: str, workspace: str) -> str:
    """Why the entrypoint's script (or program) cannot be found in ``workspace``; '' if it can.

    Checked before torch starts: a missing script would otherwise fail every worker
    of every restart with python's "can't open file" and no traceback.
    """
    try:
        command = shlex.split(entrypoint)
    except ValueError:
        return ""  # said by torchrun_args, with the parser's words
    if not command:
        return ""
    if command[0] in PYTHONS:
        if len(command) < 2 or command[1].startswith("-"):
            return ""
        script = command[1]
        if os.path.isfile(os.path.join(workspace, script)):
            return ""
        return f"EDL_ENTRYPOINT: no such script: {script} (in the workspace {workspace})"
    program = command[0]
    if "/" in program:
        found = os.path.isfile(os.path.join(workspace, program))
    else:
        found = shutil.which(program) is not None
    if found:
        return ""
    return f"EDL_ENTRYPOINT: no such program: {program} (in the workspace {workspace} or PATH)"


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes-style $(VAR) expansion of the entrypoint (unknown names kept, $$ -> $)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR.sub(replace, text)

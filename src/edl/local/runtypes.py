"""The plain data of a local run: its options, its result and the reservation pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edl.api.names import LABEL_ROLE
from edl.local.status import RunSnapshot

SUCCEEDED, FAILED, STOPPED = "Succeeded", "Failed", "Stopped"


@dataclass(frozen=True)
class RunOptions:
    """Knobs of a local run (the `edl run` flags)."""

    runs_root: Path = Path("runs")
    cpu: str | None = None  # virtual allocatable; None: this machine's cores
    memory: str | None = None  # virtual allocatable; None: this machine's memory
    policy: str = "default"
    max_load_desired: float = 0.97
    autoscale_interval_s: float = 2.0
    status_interval_s: float = 1.0
    refresh_s: float = 0.5
    max_error_exits: int = 3
    shutdown_grace_s: float = 5.0
    timeout_s: float | None = None
    checkpoint_interval_s: float = 10.0  # pserver checkpoints (EDL_CHECKPOINT_INTERVAL)
    stall_warning_s: float | None = None  # None: from the job's measured step time (`stall`)
    stall_limit_s: float | None = None  # None: a stalled job is said, not ended
    job_dir: Path = field(default_factory=Path.cwd)  # relative workspaces resolve here


@dataclass(frozen=True)
class RunResult:
    state: str  # Succeeded | Failed | Stopped
    message: str
    run_dir: Path
    snapshot: RunSnapshot

    @property
    def ok(self) -> bool:
        return self.state == SUCCEEDED


@dataclass
class RoleFailures:
    count: int = 0
    last_pod: str = ""
    last_code: int = 0
    last_message: str = ""


def reservation_pod(name: str, namespace: str, cpu: str, memory: str) -> dict[str, Any]:
    """A pod that only holds resources: an idle process that exits on SIGTERM."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_ROLE: "reservation"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "hold",
                    "command": ["python", "-c", "import signal; signal.pause()"],
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def crash_loop_reason(failures: dict[str, RoleFailures], max_error_exits: int) -> str:
    """Why the run ends when a role's pods keep exiting with an error ('' while none does)."""
    for role, failed in failures.items():
        if failed.count >= max_error_exits:
            detail = failed.last_message.strip().splitlines()
            reason = detail[-1] if detail else f"exit code {failed.last_code}"
            return (f"{role} crash loop: {failed.count} {role} pods exited with an error; "
                    f"last {failed.last_pod} (exit {failed.last_code}): {reason}")
    return ""


def failure_detail(message: str, failures: dict[str, RoleFailures]) -> str:
    """A Failed status; if it names no failed pod, plus the last master/pserver error seen.

    The Controller's message already ends with the last failed trainer's error.
    """
    if "last failed" in message:
        return message
    role, last = max(failures.items(), key=lambda item: item[1].count, default=("", None))
    if last is None or not last.last_message:
        return message
    return f"{message}; last {role} error: {last_line(last.last_message)}"


def scale_reason(resizes: Mapping[tuple[str, str], Any], job: tuple[str, str],
                 target: int) -> str:
    """The Autoscaler's reason for setting ``job`` to ``target`` trainers ("" if unknown).

    ``resizes`` holds each job's last resize, not the last tick's decisions: by the time
    a poller sees the new size, a later tick may already have decided to keep it.
    """
    decision = resizes.get(job)
    if decision is not None and decision.target == target:
        return str(decision.reason)
    return ""

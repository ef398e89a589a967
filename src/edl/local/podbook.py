"""`PodBook`: what a local run knows of its pods, kept from the control plane's pod events.

Split out of `edl.local.run`, which wires the run together, because this is one job with its
own state: a `PodLine` per pod for the display (at most `MAX_POD_LINES`, exited pods dropped
first), the error exits of each long-running role that `runtypes.crash_loop_reason` judges,
and the fault lines of exits and replacements (a replacement pserver is followed until its
log says how it came back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from edl.local.events import (
    EXIT_CONFIG,
    SIGNAL_EXIT_FLOOR,
    exit_event,
    exit_message,
    exit_phase,
    pserver_start_event,
    read_log,
)
from edl.local.process_pods import ProcessPodRunner
from edl.local.runtypes import RoleFailures, last_line
from edl.local.status import PodLine

MAX_POD_LINES = 40
JOB_ROLES = ("trainer",)  # roles whose failures the trainer Job's backoffLimit judges


class PodBook:
    """The pods of one run: their lines, the crash counts by role, the replacement notices."""

    def __init__(self, event: Callable[[str], None], fail_now: Callable[[str], None]) -> None:
        self._event = event  # one fault or decision line (`LocalRun._event`)
        self._fail_now = fail_now  # the run cannot go on (`LocalRun._fail_now`)
        self.failures: dict[str, RoleFailures] = {}
        self.pods: dict[str, PodLine] = {}
        self._exited: dict[str, str] = {}  # role -> the last pod of it that failed
        self._new_pservers: list[str] = []  # replacement pservers not yet seen serving

    def on_pod_event(self, event: str, pod: Any, runner: ProcessPodRunner | None) -> None:
        """Pod transitions from the control plane: phases, fault lines, crash counting."""
        name, role = pod.name, pod.role or "pod"
        previous = self.pods.get(name)
        if event == "exited":
            code = int((pod.manifest.get("status") or {}).get("exitCode", 0))
            message = runner.termination_message(name) if runner else ""
            ran = pod.node is not None  # bound: its processes were started
            phase = exit_phase(code, pod.terminating, ran)
            self.pods[name] = PodLine(name, role, phase, None, code,
                                      exit_message(code, last_line(message)))
            if code == EXIT_CONFIG and not pod.terminating:  # a restart would fail the same way
                self._fail_now(f"{name}: configuration error: {last_line(message)}")
            line = exit_event(name, role, code, pod.terminating, ran, last_line(message))
            if line:
                self._exited[role] = name
                self._event(line)
            if 0 < code < SIGNAL_EXIT_FLOOR and not pod.terminating and role not in JOB_ROLES:
                failures = self.failures.setdefault(role, RoleFailures())
                failures.count += 1
                failures.last_pod, failures.last_code, failures.last_message = name, code, message
        else:
            if event == "created" and role in self._exited:
                self._event(f"{role} {name} replaces {self._exited.pop(role)}")
                if role == "pserver":
                    self._new_pservers.append(name)
            phase = "Terminating" if pod.terminating else str(pod.phase)
            self.pods[name] = PodLine(
                name, role, phase, previous.pid if previous else None,
                message=previous.message if previous and phase == "Pending" else "",
            )
        if len(self.pods) > MAX_POD_LINES:
            for old in [n for n, p in self.pods.items() if p.exit_code is not None][:10]:
                del self.pods[old]

    def check_new_pservers(self, runner: ProcessPodRunner) -> None:
        """Say how each replacement pserver came back (restored from a checkpoint or not)."""
        for name in list(self._new_pservers):
            record = next((r for r in runner.records() if r.name == name), None)
            if record is None or not record.log_path:
                continue
            line = pserver_start_event(name, read_log(Path(record.log_path)))
            if line:
                self._new_pservers.remove(name)
                self._event(line)

    def lines(self, runner: ProcessPodRunner | None) -> list[PodLine]:
        """The pod lines for a snapshot, each live pod with its current pid."""
        pids = {}
        if runner is not None:
            pids = {r.name: r.pids[0] for r in runner.records() if r.pids}
        return [
            replace(p, pid=pids.get(p.name)) if p.exit_code is None else p
            for p in self.pods.values()
        ]

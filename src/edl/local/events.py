"""One line per fault or decision for `edl run`'s output (pure rules + a bounded log).

What a user needs to see of a fault is: which pod ended and how (exit code and its
last log line, or the signal that killed it), that a replacement came, how a
pserver shard came back, a master failover with the pass it resumed at, and a
scale decision. A pod stopped on purpose (a drained trainer, a released
reservation) is not a failure and reads so.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_EVENTS = 20
EXIT_CONFIG = 78  # `edl master|pserver|trainer`: a configuration error (edl.cli._runtime_common)
SIGNAL_EXIT_FLOOR = 128  # exit codes above this are deaths by signal, not script errors


def exit_phase(code: int, terminating: bool, ran: bool) -> str:
    """The phase shown for an ended pod: Succeeded, Failed, Stopped (on purpose) or Deleted."""
    if not ran:
        return "Deleted"  # deleted while Pending: it never ran, so it neither failed nor succeeded
    if terminating:
        return "Stopped"
    return "Succeeded" if code == 0 else "Failed"


def killed_by(code: int) -> str:
    """'killed by SIGKILL' for an exit status above 128 naming a signal, else ''."""
    if code <= SIGNAL_EXIT_FLOOR:
        return ""
    try:
        return f"killed by {signal.Signals(code - SIGNAL_EXIT_FLOOR).name}"
    except ValueError:
        return ""


def exit_message(code: int, last: str) -> str:
    """What a pod's line says of its end: the signal that killed it (its last log line
    was only what it happened to print before), else its last line."""
    return killed_by(code) or last


def exit_event(name: str, role: str, code: int, terminating: bool, ran: bool, last: str) -> str:
    """The line for a pod that ended ('' for ends that are no news: success, drain)."""
    if not ran or terminating or code == 0:
        return ""
    if code > SIGNAL_EXIT_FLOOR:
        try:
            how = f"was killed by {signal.Signals(code - SIGNAL_EXIT_FLOOR).name}"
        except ValueError:
            how = f"exited with status {code}"
    else:
        how = f"exited with status {code}"
    return f"{role} {name} {how}" + (f": {last}" if last and code <= SIGNAL_EXIT_FLOOR else "")


_RESTORED = re.compile(r"pserver (\d+) restored version (\d+)")
_SERVING = re.compile(r"pserver (\d+) serving on")


def pserver_start_event(name: str, log_text: str) -> str:
    """How a replacement pserver came back, from its log ('' while it is not serving yet)."""
    restored = _RESTORED.search(log_text)
    if restored:
        shard, version = restored.groups()
        return f"pserver {name} restored shard {shard} from checkpoint version {version}"
    serving = _SERVING.search(log_text)
    if serving:
        return (f"pserver {name} serves shard {serving.group(1)} with no checkpoint: the "
                "trainers re-initialise it (its optimizer state is lost)")
    return ""


def failover_event(previous: dict[str, Any] | None, progress: dict[str, Any] | None) -> str:
    """A master failover, seen as a new leader address in the published progress."""
    if not previous or not progress:
        return ""
    before, now = previous.get("leader"), progress.get("leader")
    if not before or not now or before == now:
        return ""
    passes = progress.get("passes")
    resumed = progress.get("resumed_pass")
    where = f" at pass {resumed + 1}/{passes}" if isinstance(resumed, int) and passes else ""
    done = progress.get("resumed_done")
    total = progress.get("tasks_total")
    tasks = f" with {done}/{total} tasks of it done" if done is not None and total else ""
    return f"master failover: the master at {now} leads, resumed{where}{tasks}"


@dataclass
class EventLog:
    """The run's last events, with their time since the start."""

    started: float = field(default_factory=time.monotonic)
    events: list[list[Any]] = field(default_factory=list)
    total: int = 0

    def add(self, text: str) -> bool:
        if not text:
            return False
        self.events.append([round(time.monotonic() - self.started, 1), text])
        del self.events[:-MAX_EVENTS]
        self.total += 1
        return True


def read_log(path: Path, limit: int = 65536) -> str:
    """The start of a pod's log (where a pserver says how it came up)."""
    try:
        with path.open("rb") as handle:
            return handle.read(limit).decode(errors="replace")
    except OSError:
        return ""

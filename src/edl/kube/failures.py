"""Why a trainer Job failed on Kubernetes, from its pods (pure).

Kubernetes' Job condition says only ``BackoffLimitExceeded``; the cause is in
the failed trainer pods, whose ``trainer`` container keeps the tail of its log
as termination message (the JobParser sets ``terminationMessagePolicy:
FallbackToLogsOnError``). The Controller puts the last one in the TrainingJob's
status, as the in-process cluster's ``last_trainer_failure`` does locally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from edl.control.job_status import is_secondary_failure

TRAINER_CONTAINER = "trainer"
DRAINED_EXIT = 143  # a trainer drained by SIGTERM: the Job ignores it, so does this
MAX_CHARS = 500


def last_trainer_failure(pods: Iterable[Mapping[str, Any]]) -> str:
    """``<pod> (exit N): <last line of its message>`` of the trainer that failed last, or "".

    Only pods in phase Failed whose trainer container terminated with a code
    other than 0 and 143 count; one whose line reports only a peer's failure
    (`is_secondary_failure`) counts only when no other does; then the latest
    ``finishedAt`` wins (RFC 3339 times compare as text), then the pod name, so the
    answer does not depend on order.
    """
    best: tuple[tuple[bool, str, str], str] | None = None
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Failed":
            continue
        name = str((pod.get("metadata") or {}).get("name") or "")
        for container in status.get("containerStatuses") or ():
            if container.get("name") != TRAINER_CONTAINER:
                continue
            terminated = (container.get("state") or {}).get("terminated") or {}
            code = int(terminated.get("exitCode") or 0)
            if code in (0, DRAINED_EXIT):
                continue
            lines = [
                line.strip()
                for line in str(terminated.get("message") or "").splitlines()
                if line.strip()
            ]
            why = lines[-1] if lines else str(terminated.get("reason") or "")
            text = f"{name} (exit {code})" + (f": {why[:MAX_CHARS]}" if why else "")
            # a cause before a peer's side of it, then the latest
            key = (not is_secondary_failure(why), str(terminated.get("finishedAt") or ""), name)
            if best is None or key > best[0]:
                best = (key, text)
    return best[1] if best is not None else ""

"""What admission makes of each job's trainer pod: one server-side dry-run create per
pod template (`TrainerDryRuns`), and the watched inputs that change its answer.

Why: LimitRange defaults, ExtendedResourceToleration, RuntimeClass overhead, the
Priority plugin and mutating webhooks change a pod after edl wrote its template, and
kube-scheduler places the admitted pod. A dry-run create (``dryRun=All``) goes through
the same admission chain, validating policies included, and stores nothing. Its answer
is cached per trainer Job and template digest, and asked again (at most once per
``min_gap_s``) when the template changes, when a LimitRange of the job's namespace or
any PriorityClass changes (both watched into a `ChangeStore`), and
``retry_s`` after a refusal. A failed call (network, 5xx) keeps the last answer, or
none: the planner then reads the template, as it would without this reader; so does a
namespace's full ResourceQuota ("exceeded quota": the planner counts quotas itself).
`edl.accounting.admitted` reads the answer (pure).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import LimitRange, Pod
from lightkube.resources.scheduling_v1 import PriorityClass

from edl.accounting.admitted import (
    AdmittedTrainer,
    admitted_trainer,
    refused_trainer,
    template_hash,
)
from edl.cluster.port import Manifest
from edl.control.trainer_pods import trainer_pod
from edl.kube.reflector import FingerprintStore, Reflector
from edl.kube.retry import http_status

log = logging.getLogger(__name__)

REFUSALS = frozenset({400, 403, 409, 422})  # the API server's answer, not an outage
# quota admission checks a dry-run as a create: a namespace at its quota refuses it, yet
# the template is fine (the planner counts quotas from the watched ResourceQuotas)
QUOTA_FULL = "exceeded quota"
SWEEP_S = 600.0


class ChangeStore(FingerprintStore):
    """`reflector.Store` that remembers only each object's resourceVersion and counts
    changes per namespace (cluster-scoped kinds: under "")."""

    def __init__(self) -> None:
        super().__init__()
        self._changes: dict[str, int] = {}

    def version(self, namespace: str = "") -> int:
        """How often the namespace's objects changed (0: never seen a change)."""
        return self._changes.get(namespace, 0)

    def key(self, obj: dict[str, Any]) -> tuple[str, str] | None:
        meta = obj.get("metadata") or {}
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def fingerprint(self, obj: dict[str, Any]) -> Hashable:
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")

    def changed(self, key: tuple[str, str], obj: dict[str, Any] | None) -> None:
        self._changes[key[0]] = self._changes.get(key[0], 0) + 1


@dataclass(slots=True)
class _Entry:
    digest: str
    stamp: tuple[int, int]
    answer: AdmittedTrainer | None
    at: float  # when it was asked (monotonic)
    until: float | None  # ask again from then on (a refusal, an outage), whatever changes


def dry_run_pod(trainer: Manifest) -> dict[str, Any]:
    """The pod edl's trainer controller would create for the trainer Job, named by the
    server (``generateName``): admission sees exactly that pod."""
    pod = trainer_pod(trainer, "")
    meta = pod["metadata"]
    del meta["name"]
    meta["generateName"] = f"{trainer['metadata']['name']}-"[:58]
    return pod


def _message(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    text = getattr(status, "message", None)
    return " ".join(str(text or exc).split())


class TrainerDryRuns:
    """Per trainer Job, the admitted trainer pod (`AdmittedTrainer`), cached."""

    def __init__(self, client: AsyncClient, limit_ranges: ChangeStore,
                 classes: ChangeStore, *, min_gap_s: float = 2.0,
                 retry_s: float = 30.0, parallel: int = 8,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.limit_ranges, self.classes = limit_ranges, classes
        self.min_gap_s, self.retry_s = min_gap_s, retry_s
        self.clock = clock
        self.calls = 0  # dry-runs made (a test reads it)
        self._cache: dict[tuple[str, str], _Entry] = {}
        # answers of trainer Jobs not asked about for a sweep period are dropped (deleted)
        self._used: set[tuple[str, str]] = set()
        self._swept = clock()
        self._gate = asyncio.Semaphore(parallel)

    def forget(self, namespace: str, name: str) -> None:
        """A trainer Job is gone: drop its answer."""
        self._cache.pop((namespace, name), None)

    async def admitted(self, trainer: Manifest) -> AdmittedTrainer | None:
        """The trainer pod as admission makes it (None: not known; plan the template)."""
        meta = trainer.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        key = (namespace, str(meta.get("name") or ""))
        template = (trainer.get("spec") or {}).get("template") or {}
        digest = template_hash(template)
        stamp = (self.limit_ranges.version(namespace), self.classes.version())
        now = self.clock()
        if now - self._swept >= SWEEP_S:
            self._cache = {k: e for k, e in self._cache.items() if k in self._used}
            self._used, self._swept = set(), now
        self._used.add(key)
        entry = self._cache.get(key)
        if entry is not None and entry.digest == digest:
            fresh = entry.stamp == stamp and (entry.until is None or now < entry.until)
            if fresh or now - entry.at < self.min_gap_s:
                return entry.answer
        last = entry.answer if entry is not None and entry.digest == digest else None
        async with self._gate:
            answer, wait = await self._ask(trainer, template, namespace, last)
        self._cache[key] = _Entry(digest, stamp, answer, now,
                                  None if wait is None else now + wait)
        return answer

    async def _ask(self, trainer: Manifest, template: dict[str, Any], namespace: str,
                   last: AdmittedTrainer | None) -> tuple[AdmittedTrainer | None, float | None]:
        """The answer, and after how long to ask again whatever changes (None: only
        when an input changes)."""
        pod = dry_run_pod(copy.deepcopy(dict(trainer)))
        self.calls += 1
        try:
            # lightkube's create() overloads do not match its own generated resources
            created = await self.client.create(  # type: ignore[call-overload]
                Pod.from_dict(pod), namespace=namespace, dry_run=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            status, message = http_status(exc), _message(exc)
            if status in REFUSALS and QUOTA_FULL not in message:
                return refused_trainer(message), self.retry_s
            if status in REFUSALS:  # a full quota: the planner counts quotas itself
                return last, self.retry_s
            log.warning("dry-run of a trainer pod of %s/%s failed (%s); planning from %s",
                        namespace, trainer["metadata"]["name"], message,
                        "the last answer" if last is not None else "the template")
            return last, self.min_gap_s
        return admitted_trainer(template, created.to_dict()), None


class KubeAdmission:
    """`KubeCluster`'s part: the LimitRange and PriorityClass watches and the dry-runs."""

    client: AsyncClient

    def _watch_admission(self, watch_client: AsyncClient) -> list[Reflector]:
        """Start following LimitRanges (every namespace) and PriorityClasses."""
        self.limit_ranges = ChangeStore()
        self.priority_classes = ChangeStore()
        self.dry_runs = TrainerDryRuns(self.client, self.limit_ranges, self.priority_classes)
        return [Reflector(watch_client, LimitRange, self.limit_ranges),
                Reflector(watch_client, PriorityClass, self.priority_classes, namespace=None)]

    async def admitted_trainer(self, trainer: Manifest) -> AdmittedTrainer | None:
        """The trainer Job's pod as admission makes it (`TrainerDryRuns.admitted`)."""
        return await self.dry_runs.admitted(trainer)

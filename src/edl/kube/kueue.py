"""Kueue on Kubernetes (`edl controller --kueue`): what edl follows of it at once.

Kueue suspends and unsuspends the trainer Job (admission, preemption) and edits its pod
template (the ResourceFlavor's node labels and tolerations). Without a watch on Jobs those
changes reached edl's trainer controller only at its resync (30 s); with ``--kueue`` a
reflector follows the trainer Jobs (label ``edl.dev/role=trainer``) and every change of
a Job's spec (its ``metadata.generation``) reconciles that job at once. A queued job's
status then says why it waits in Kueue's words, read from its Workloads.

Both need RBAC that edl's default role does not grant (``list``/``watch`` on Jobs, read
on Kueue's Workloads): deploy/kueue-rbac.yaml, applied only on a cluster that runs Kueue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lightkube.generic_resource import create_namespaced_resource

from edl.api.names import LABEL_JOB
from edl.cluster.port import ClusterError, Manifest
from edl.control.kueue import JOB_UID_LABEL, queued, workload_words

if TYPE_CHECKING:
    from lightkube import AsyncClient

log = logging.getLogger(__name__)

Workload = create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads")
TRAINER_JOB_SELECTOR = "edl.dev/role=trainer"


class TrainerJobStore:
    """`reflector.Store` for trainer Jobs: tells ``changed(namespace, job)`` when a Job's
    spec changed (its generation), it appeared or went; status writes (edl's own,
    several a second) change no generation and tell nothing."""

    def __init__(self, changed: Callable[[str, str], None]) -> None:
        self.changed = changed
        self._generations: dict[tuple[str, str], Any] = {}
        self._listed: set[tuple[str, str]] | None = None

    def begin_replace(self) -> None:
        self._listed = set()

    def end_replace(self) -> None:
        if self._listed is not None:
            for key in set(self._generations) - self._listed:
                del self._generations[key]
                self.changed(*key)
        self._listed = None

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(LABEL_JOB)
        if not owner:
            return
        key = (str(meta.get("namespace") or "default"), str(owner))
        if self._listed is not None:
            self._listed.add(key)
        if event_type == "DELETED":
            self._generations.pop(key, None)
            self.changed(*key)
            return
        generation = meta.get("generation")
        if self._generations.get(key) != generation:
            self._generations[key] = generation
            self.changed(*key)


class KubeKueue:
    """Reads of Kueue's Workloads (a mixin of `KubeCluster`)."""

    client: AsyncClient
    kueue: bool

    async def queue_words(self, trainer: Manifest) -> str:
        """Why Kueue holds (or has admitted) this trainer Job, in Kueue's words; "" when
        it is not queued, ``--kueue`` is off, or Kueue has no Workload for it yet."""
        meta = trainer.get("metadata") or {}
        uid = meta.get("uid")
        if not (self.kueue and uid and queued(trainer)):
            return ""
        namespace = str(meta.get("namespace") or "default")
        try:
            found = [w.to_dict() if hasattr(w, "to_dict") else dict(w)
                     async for w in self.client.list(Workload, namespace=namespace,
                                                     labels={JOB_UID_LABEL: str(uid)})]
        except Exception as error:  # the status says less; the job is not affected
            log.warning("Workloads of trainer Job %s/%s not read: %s", namespace,
                        meta.get("name"), error)
            raise ClusterError("Workload", namespace, str(meta.get("name")),
                               str(error)) from error
        return workload_words(found)

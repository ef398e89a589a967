"""TrainingJob events on Kubernetes: the bodies kopf delivers, fanned out to the handlers.

A mixin of `KubeCluster`, split from it to keep one job apart: kopf
(`edl.kube.operator`) calls ``dispatch_add/update/del``; this keeps the latest body of
every TrainingJob seen and hands each event, in order and one at a time, to the
handlers registered with `watch_training_jobs` (the port's promise). The rest of
`KubeCluster` reads those bodies (`training_job`) for ownerReferences, trainer ranges
and status writes.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from typing import Any

from edl.api.names import JobKey, training_job_key
from edl.cluster.port import NotLeaderError, TrainingJobHandler, Unsubscribe

log = logging.getLogger(__name__)


class KubeTrainingJobs:
    """The TrainingJob bodies seen last and their handlers (a mixin of `KubeCluster`)."""

    _handlers: list[TrainingJobHandler]
    _jobs: dict[JobKey, dict[str, Any]]  # latest TrainingJob bodies seen
    _dispatch_lock: asyncio.Lock

    def watch_training_jobs(self, handler: TrainingJobHandler) -> Unsubscribe:
        """Register a handler; kopf (edl.kube.operator) delivers events through dispatch_*.

        Jobs already seen are replayed to the new handler as ``on_add`` first, under the
        dispatch lock, so it hears of every job in order whenever it subscribes.
        """
        replay = asyncio.get_running_loop().create_task(self._subscribe(handler))

        def unsubscribe() -> None:
            replay.cancel()
            if handler in self._handlers:
                self._handlers.remove(handler)

        return unsubscribe

    async def _subscribe(self, handler: TrainingJobHandler) -> None:
        async with self._dispatch_lock:
            for obj in list(self._jobs.values()):
                try:
                    await handler.on_add(copy.deepcopy(obj))
                except Exception:  # a handler bug must not stop the others' events
                    log.exception("TrainingJob replay to a new handler failed")
            self._handlers.append(handler)

    def training_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._jobs.get((namespace, name))

    def training_jobs(self) -> list[tuple[JobKey, dict[str, Any]]]:
        """Every TrainingJob body seen last, with its (namespace, name)."""
        return list(self._jobs.items())

    async def dispatch_add(self, body: Mapping[str, Any]) -> None:
        await self._dispatch("on_add", body)

    async def dispatch_update(self, body: Mapping[str, Any]) -> None:
        await self._dispatch("on_update", body)

    async def dispatch_del(self, body: Mapping[str, Any]) -> None:
        await self._dispatch("on_del", body)

    async def _dispatch(self, method: str, body: Mapping[str, Any]) -> None:
        key = training_job_key(body)
        if key is None:  # nothing to name children or a status after; never crash the watch
            log.warning("ignoring a TrainingJob without a usable metadata.name: %.200r", body)
            return
        obj = copy.deepcopy(dict(body))
        async with self._dispatch_lock:  # one event at a time, in order (the port's promise)
            if method == "on_del":
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = obj
            for handler in list(self._handlers):
                try:
                    await getattr(handler, method)(copy.deepcopy(obj))
                except NotLeaderError as error:
                    # deposed (or stopping): the next leader handles this job; raising
                    # would make kopf retry a write that is fenced off for good
                    log.info("TrainingJob %s/%s %s dropped: %s", *key, method, error)
                    return

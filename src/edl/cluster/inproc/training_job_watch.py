"""The in-process TrainingJob watch: store events delivered to a handler in order.

Why a module of its own: it is the one informer-like piece of `InProcessCluster`
(a queue fed by a store listener and drained by a task on the running loop), a
concern apart from the cluster's API, which only hands it its store.
"""

from __future__ import annotations

import asyncio
import logging

from edl.api.names import object_key
from edl.cluster.inproc.controllers import TRAINING_JOB
from edl.cluster.inproc.store import ObjectStore, copy_manifest
from edl.cluster.port import Manifest, TrainingJobHandler, Unsubscribe

__all__ = ["watch_training_jobs"]

log = logging.getLogger(__name__)


def watch_training_jobs(store: ObjectStore, handler: TrainingJobHandler) -> Unsubscribe:
    """Deliver TrainingJob events to ``handler`` in order, from a task on the running loop."""
    queue: asyncio.Queue[tuple[str, Manifest]] = asyncio.Queue()
    for obj in store.items(TRAINING_JOB):
        queue.put_nowait(("ADDED", copy_manifest(obj)))

    def listener(event: str, obj: Manifest, old: Manifest | None) -> None:
        queue.put_nowait((event, copy_manifest(obj)))

    unlisten = store.listen(TRAINING_JOB, listener)
    task = asyncio.get_running_loop().create_task(_deliver(queue, handler))

    def unsubscribe() -> None:
        unlisten()
        task.cancel()

    return unsubscribe


async def _deliver(queue: asyncio.Queue[tuple[str, Manifest]], handler: TrainingJobHandler) -> None:
    methods = {
        "ADDED": handler.on_add,
        "MODIFIED": handler.on_update,
        "DELETED": handler.on_del,
    }
    while True:
        event, obj = await queue.get()
        try:
            await methods[event](obj)
        except Exception:  # a handler bug must not stop the watch, as with an informer
            log.exception("TrainingJob %s handler failed for %s", event, object_key(obj))

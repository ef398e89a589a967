"""kopf handlers: TrainingJob events -> `KubeCluster.dispatch_*` -> the Controller.

kopf owns watching TrainingJobs (list+watch, reconnects, 410 handling), handler
retries and backoff; edl owns only the logic (the Controller). The registry is
built per process so tests can run an operator against kmock's emulator.

Settings chosen for edl:
- progress and diff-base are kept in annotations (prefix `edl.dev`), not in
  `status.kopf`, because the structural schema would prune unknown status fields;
- kopf's own per-handler Events are off: edl posts the Events that matter
  (scale decisions, failures) itself;
- standalone (no kopf peering): one active replica is guaranteed by our Lease;
- no CRD/namespace scanning: the controller's RBAC does not allow it;
- only the TrainingJobs of this installation (`edl.api.installation`): a job another
  installation runs is left alone, with one log line saying which runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

import kopf

from edl.api.installation import LABEL_INSTALLATION, current, installation_of, runs
from edl.api.names import training_job_key
from edl.kube.cluster import KubeCluster
from edl.kube.crd import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "edl.dev"
# kopf warns on every start that it runs off the main thread and so cannot handle signals.
# In edl that is by design and not a loss: the main thread owns SIGTERM/SIGINT
# (`ControllerProcess.stop_on_signals`) and stops kopf through its stop_flag. Only this one
# record is dropped; everything else kopf logs passes.
THREAD_SIGNALS_WARNING = "OS signals are ignored: running not in the main thread"


class _OwnSignals(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(THREAD_SIGNALS_WARNING)


_REACTOR_LOG = logging.getLogger("kopf._core.reactor.running")


def build_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = f"{ANNOTATION_PREFIX}/finalizer"
    settings.posting.enabled = False
    settings.scanning.disabled = True
    settings.process.ultimate_exiting_timeout = None  # never SIGKILL our own process
    settings.watching.server_timeout = 300
    settings.watching.reconnect_backoff = 0.5
    settings.networking.request_timeout = 30
    return settings


def build_registry(cluster: KubeCluster, server: str | None) -> kopf.OperatorRegistry:
    """Handlers bound to `cluster`; `server` (a URL) bypasses kubeconfig discovery."""
    registry = kopf.OperatorRegistry()
    resource = (GROUP, VERSION, PLURAL)
    ours = _Installation()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if server:
            return kopf.ConnectionInfo(server=server, default_namespace="default")
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.resume(*resource, registry=registry, when=ours.runs)
    @kopf.on.create(*resource, registry=registry, when=ours.runs)
    async def added(body: kopf.Body, **_: Any) -> None:
        await _deliver(cluster.dispatch_add, body)

    @kopf.on.update(*resource, registry=registry, when=ours.runs)
    async def updated(body: kopf.Body, **_: Any) -> None:
        await _deliver(cluster.dispatch_update, body)

    # Deletion is observed from the raw DELETED watch event, with no finalizer: children
    # carry ownerReferences, so the garbage collector removes them even if the controller
    # is down, and nothing blocks `kubectl delete` on a dead controller.
    @kopf.on.event(*resource, registry=registry)
    async def deleted(type: str | None, body: kopf.Body, **_: Any) -> None:
        if not ours.runs(body):
            return
        if type == "DELETED":
            await _deliver(cluster.dispatch_del, body, retry=False)

    return registry


class _Installation:
    """Which TrainingJobs this installation runs; says once of each other one that it
    is left alone (again if its label changes)."""

    def __init__(self) -> None:
        self._told: dict[tuple[str, str], str] = {}

    def runs(self, body: Any, **_: Any) -> bool:
        key = training_job_key(body)
        if runs(body):
            if key is not None:
                self._told.pop(key, None)
            return True
        other = installation_of(body)
        if key is not None and self._told.get(key) != other:
            self._told[key] = other
            log.info("TrainingJob %s/%s is run by installation %s (label %s), not by this "
                     "one (%s): left alone", *key, other, LABEL_INSTALLATION, current())
        return False


async def _deliver(dispatch: Any, body: kopf.Body, retry: bool = True) -> None:
    """Hand a job to the Controller; API trouble is retried by kopf, nothing else is."""
    try:
        await dispatch(_plain(body))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        where = "/".join(training_job_key(body) or ("?", "?"))
        if not retry:  # event handlers are not retried by kopf; the GC still cleans up
            log.warning("handling deletion of %s failed: %s", where, exc)
            return
        # The Controller reports bad jobs in their status itself; an exception here is
        # an API failure (after our own retries) or a bug: let kopf retry it later.
        log.warning("handling %s failed: %s", where, exc)
        raise kopf.TemporaryError(str(exc), delay=5) from exc


def _plain(body: kopf.Body) -> dict[str, Any]:
    """kopf's Body is a read-only view; the Controller gets a plain dict copy."""
    def thaw(value: Any) -> Any:
        if isinstance(value, dict) or hasattr(value, "items"):
            return {k: thaw(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [thaw(v) for v in value]
        return value

    return thaw(body)


class OperatorThread:
    """kopf on its own thread and event loop; handlers hop onto the controller's loop.

    Why a thread: when kopf.operator() ends it cancels every task created on its
    loop while it ran ("hung tasks"), which would include the Controller's and
    Autoscaler's. On its own loop kopf only sees its own tasks. The Controller
    still runs one event at a time on the main loop (`dispatch_*` takes a lock).
    """

    def __init__(self, cluster: KubeCluster, *, server: str | None,
                 namespace: str | None) -> None:
        self.cluster = cluster
        self.server = server
        self.namespace = namespace
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None
        self._done: asyncio.Future[None] | None = None

    def start(self) -> None:
        main_loop = asyncio.get_running_loop()
        self._done = main_loop.create_future()
        bridge = _Bridge(self.cluster, main_loop)
        if not any(isinstance(f, _OwnSignals) for f in _REACTOR_LOG.filters):
            _REACTOR_LOG.addFilter(_OwnSignals())
        # _Bridge has KubeCluster's dispatch_* methods, all the handlers call
        registry = build_registry(bridge, self.server)  # type: ignore[arg-type]

        def run() -> None:
            try:
                asyncio.run(kopf.operator(
                    registry=registry,
                    settings=build_settings(),
                    standalone=True,
                    clusterwide=self.namespace is None,
                    namespaces=[self.namespace] if self.namespace else (),
                    stop_flag=self.stop_flag,
                ))
            except BaseException as exc:  # reported to the main loop, not lost in the thread
                self.error = exc
            finally:
                main_loop.call_soon_threadsafe(self._finish)

        threading.Thread(target=run, name="kopf", daemon=True).start()

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            if self.error is not None:
                self._done.set_exception(RuntimeError(f"kopf stopped: {self.error!r}"))
            else:
                self._done.set_result(None)

    async def wait(self) -> None:
        """Until kopf ends (it only ends when stopped or broken)."""
        assert self._done is not None, "start() first"
        await asyncio.shield(self._done)

    async def stop(self, timeout: float = 15.0) -> None:
        self.stop_flag.set()
        if self._done is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._done), timeout)


class _Bridge:
    """Looks like KubeCluster to the kopf handlers; runs dispatches on the main loop."""

    def __init__(self, cluster: KubeCluster, loop: asyncio.AbstractEventLoop) -> None:
        self.cluster = cluster
        self.loop = loop

    async def dispatch_add(self, body: dict[str, Any]) -> None:
        await self._hop(self.cluster.dispatch_add(body))

    async def dispatch_update(self, body: dict[str, Any]) -> None:
        await self._hop(self.cluster.dispatch_update(body))

    async def dispatch_del(self, body: dict[str, Any]) -> None:
        await self._hop(self.cluster.dispatch_del(body))

    async def _hop(self, coro: Any) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

"""Leader election through a coordination.k8s.io/v1 Lease.

Why: two controller replicas must never scale at once (they would fight over
each job's parallelism). The replica holding the Lease runs the controller and
autoscaler; the others wait and take over when the holder stops renewing.

The algorithm is client-go's: a record is expired when it has not changed for
`lease_duration` seconds *as observed on our own monotonic clock*, so clock
skew between nodes does not matter. Every write carries the resourceVersion we
read, so two candidates racing for an expired lease cannot both win: the API
server rejects the second write with 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from edl.kube.retry import describe_failure, http_status, is_conflict, is_not_found

log = logging.getLogger(__name__)


class LeaseLost(RuntimeError):
    """We could not renew the Lease in time; another replica may now lead."""


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Observed:
    holder: str | None
    renew_time: str | None
    resource_version: str | None
    observed_at: float


class LeaderElector:
    """Acquire and keep one Lease; `run_as_leader` wraps a coroutine in leadership."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        server: str = "the API server",
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.server = server
        self.is_leader = False
        # Why the last election round failed (None: it worked, whoever holds the Lease):
        # readiness reports it, since a replica that cannot reach its Lease cannot lead.
        self.last_error: str | None = None
        self._observed: _Observed | None = None
        self._renewed_at: float | None = None  # our last successful write of the Lease
        # an acquiring write whose answer we have not read: a stop (SIGTERM) that lands
        # then may leave the Lease ours on the server though we never knew we led
        self._acquiring = False

    # -- one attempt ---------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """One round of the election; True if we hold the Lease afterwards."""
        try:
            lease = await self.client.get(Lease, self.name, namespace=self.namespace)
        except Exception as exc:
            if not is_not_found(exc):
                raise
            return await self._create()
        raw = lease.to_dict()
        spec = raw.get("spec") or {}
        meta = raw.get("metadata") or {}
        holder = spec.get("holderIdentity")
        renew = spec.get("renewTime")
        version = meta.get("resourceVersion")
        obs = self._observed
        seen = (holder, renew, version)
        if obs is None or (obs.holder, obs.renew_time, obs.resource_version) != seen:
            self._observed = obs = _Observed(holder, renew, version, self.clock())
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = self.clock() - obs.observed_at > duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        now = _now_micro()
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": version} if version else {},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "renewTime": now,
            },
        }
        if holder != self.identity:
            patch["spec"].update(acquireTime=now, leaseTransitions=transitions + 1)
        try:
            updated = await self.client.patch(
                Lease, self.name, patch, namespace=self.namespace, patch_type=PatchType.MERGE
            )
        except Exception as exc:
            if is_conflict(exc):
                return False  # somebody else wrote first; re-read next round
            raise
        self._remember(updated.to_dict())
        return True

    async def _create(self) -> bool:
        now = _now_micro()
        body = Lease.from_dict({
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        })
        try:
            # lightkube's create() overloads do not match its own generated resources
            created = await self.client.create(  # type: ignore[call-overload]
                body, namespace=self.namespace)
        except Exception as exc:
            if is_conflict(exc):
                return False
            raise
        self._remember(created.to_dict())
        return True

    def holds_lease(self) -> bool:
        """Whether writes may go out now: we lead and renewed within ``renew_deadline``.

        The fence for every write of the leader's work: past the deadline the renew
        loop is about to declare the Lease lost, and a standby may take it once
        ``lease_duration`` has passed, so nothing is written in between.
        """
        renewed = self._renewed_at
        return (self.is_leader and renewed is not None
                and self.clock() - renewed < self.renew_deadline)

    def _remember(self, raw: dict[str, Any]) -> None:
        spec = raw.get("spec") or {}
        if spec.get("holderIdentity") == self.identity:
            self._renewed_at = self.clock()
        self._observed = _Observed(
            spec.get("holderIdentity"), spec.get("renewTime"),
            (raw.get("metadata") or {}).get("resourceVersion"), self.clock(),
        )

    # -- loops ---------------------------------------------------------------

    def explain(self, exc: BaseException) -> str:
        """Why an election round failed, in words an admin can act on."""
        lease = f"Lease {self.namespace}/{self.name}"
        text = f"{lease}: {describe_failure(exc, self.server)}"
        if http_status(exc) == 403:
            text += (f" (the ServiceAccount may use only the Lease its Role grants: "
                     f"deploy/rbac.yaml grants {self.name} in edl-system; "
                     f"is --lease-namespace={self.namespace} right?)")
        return text

    def _failed(self, exc: BaseException, doing: str) -> None:
        """Remember and log a failed round; the same error again is logged at debug level."""
        text = self.explain(exc)
        level = logging.DEBUG if text == self.last_error else logging.WARNING
        log.log(level, "%s failed: %s", doing, text)
        self.last_error = text

    async def acquire(self) -> None:
        """Wait until we hold the Lease."""
        while True:
            try:
                self._acquiring = True
                won = await self.try_acquire_or_renew()
                self._acquiring = False  # not reached when cancelled: release() then checks
                if won:
                    self.is_leader = True
                    self.last_error = None
                    log.info("%s acquired lease %s/%s", self.identity, self.namespace, self.name)
                    return
                if self.last_error is not None:
                    log.info("lease %s/%s readable again; held by %s", self.namespace,
                             self.name, self._observed.holder if self._observed else "nobody")
                self.last_error = None  # read it; another replica holds it
            except Exception as exc:  # API trouble: keep trying, we are not leading anyway
                self._acquiring = False
                self._failed(exc, "lease acquire")
            await asyncio.sleep(self.retry_period)

    async def keep_renewing(self) -> None:
        """Renew every retry_period; raise LeaseLost after renew_deadline without success."""
        last_success = self.clock()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                # not wait_for: on Python 3.11 it swallows a cancel that arrives as the
                # renewal completes, and this loop would renew on after its leader stopped
                async with asyncio.timeout(self.renew_deadline):
                    ok = await self.try_acquire_or_renew()
            except Exception as exc:
                self._failed(exc, "lease renew")
                ok = False
            if ok:
                self.last_error = None
                last_success = self.clock()
            elif self.clock() - last_success > self.renew_deadline:
                self.is_leader = False
                raise LeaseLost(f"{self.identity} lost lease {self.namespace}/{self.name}")

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby need not wait for expiry.

        As client-go, the write carries the resourceVersion we read last, so it never
        overwrites a successor. A conflict can also mean our own renewal landed after
        we stopped reading its answer: re-read once, and release only if we still hold it.
        A candidate stopped while its acquiring write was in flight reads the Lease too,
        and releases it if that write made it the holder.
        """
        if not (self.is_leader or self._acquiring):
            return
        leading, self.is_leader, self._acquiring = self.is_leader, False, False
        observed = self._observed
        version = observed.resource_version if observed is not None else None
        release = self._release_once(version) if leading else self._release_if_ours()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(release, self.retry_period * 4)

    async def _release_once(self, version: str | None) -> None:
        try:
            await self._clear_holder(version)
        except Exception as exc:
            if not is_conflict(exc):
                raise
            await self._release_if_ours()

    async def _release_if_ours(self) -> None:
        """Clear the holder if it is us, as the Lease reads now (never a successor's)."""
        lease = (await self.client.get(Lease, self.name, namespace=self.namespace)).to_dict()
        if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return  # a successor holds it, or nobody: leave it alone
        await self._clear_holder((lease.get("metadata") or {}).get("resourceVersion"))

    async def _clear_holder(self, version: str | None) -> None:
        patch: dict[str, Any] = {"spec": {"holderIdentity": None, "leaseDurationSeconds": 1}}
        if version:
            patch["metadata"] = {"resourceVersion": version}
        await self.client.patch(Lease, self.name, patch, namespace=self.namespace,
                                patch_type=PatchType.MERGE)

    async def run_as_leader(self, body: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Acquire, then run `body` while renewing; if renewal fails, cancel body and raise.

        Stopped (cancelled) at any point, acquiring included, it gives the Lease up."""
        tasks: list[asyncio.Task[None]] = []
        try:
            await self.acquire()
            tasks = [asyncio.create_task(self.keep_renewing(), name="lease-renew"),
                     asyncio.create_task(body(), name="leader-work")]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # re-raise LeaseLost or a failure of the work
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.release()

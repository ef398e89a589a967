"""kmock's Kubernetes emulator, extended with the API-server behaviour edl's tests rely on.

kmock's `KubernetesEmulator` is an in-memory object store over HTTP: create,
merge-patch, delete, list and watch. It does NOT assign resourceVersions, uids
or generations, does not filter by label/field selectors, has no server-side
apply, and runs no controllers (no garbage collector, no Job/ReplicaSet
controller, no scheduler). This subclass adds, and only adds:

* `metadata.resourceVersion` (a global counter), `uid`, `generation`
  (bumped when `spec` changes) and `creationTimestamp` on every write;
* optimistic concurrency: a PATCH whose body carries a stale
  `metadata.resourceVersion` gets 409 Conflict, as the API server answers;
* server-side apply's upsert: an apply PATCH on a missing object creates it
  (field ownership and removal of dropped fields are NOT emulated: an apply is
  a merge);
* `dryRun=All` writes: answered with the body sent (named), nothing stored
  (`dry_runs` keeps the bodies); admission is not emulated;
* fault injection (`fail_next`): answer the next N matching requests with an
  error status *before* touching any state;
* `expire_watches`: push a 410 Gone ERROR event into every open watch of a
  resource, as the API server does when a watch's resourceVersion is compacted;
* `send_bookmark`: push a BOOKMARK event, shaped as the API server's (an empty
  object of the kind, carrying only a resourceVersion: a Pod's `spec.containers`
  is null).

Anything here is a test double: passing these tests means the real lightkube and
kopf code paths work against an HTTP server that speaks the Kubernetes API, not
that the system works on a Kubernetes cluster.
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True),
    "v1/nodes": kmock.ResourceInfo(kind="Node", namespaced=False),
    "v1/resourcequotas": kmock.ResourceInfo(kind="ResourceQuota", namespaced=True),
    "v1/limitranges": kmock.ResourceInfo(kind="LimitRange", namespaced=True),
    "scheduling.k8s.io/v1/priorityclasses": kmock.ResourceInfo(kind="PriorityClass",
                                                                namespaced=False),
    # kopf waits until discovery shows namespaces and CRDs, as a real API server does.
    "v1/namespaces": kmock.ResourceInfo(kind="Namespace", namespaced=False),
    "apiextensions.k8s.io/v1/customresourcedefinitions": kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "batch/v1/jobs": kmock.ResourceInfo(kind="Job", namespaced=True, subresources={"status"}),
    "apps/v1/replicasets": kmock.ResourceInfo(kind="ReplicaSet", namespaced=True),
    "coordination.k8s.io/v1/leases": kmock.ResourceInfo(kind="Lease", namespaced=True),
    # Kueue's, for `edl controller --kueue` (kmock runs no Kueue: a test admits by hand)
    "kueue.x-k8s.io/v1beta2/workloads": kmock.ResourceInfo(kind="Workload", namespaced=True,
                                                           subresources={"status"}),
    "kueue.x-k8s.io/v1beta2/resourceflavors": kmock.ResourceInfo(kind="ResourceFlavor",
                                                                 namespaced=False),
    "edl.dev/v1/trainingjobs": kmock.ResourceInfo(
        kind="TrainingJob", singular="trainingjob", namespaced=True, shortnames={"tj"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        subresources={"status", "scale"},
    ),
}


@dataclass
class Fault:
    match: Callable[[kmock.Request], bool]
    status: int
    remaining: int
    hits: int = 0


def _status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": message}


@attrs.define(kw_only=True)
class EdlEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus resourceVersions, optimistic locking, apply-upsert and faults."""

    _versions: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    current_version: int = attrs.field(default=0, init=False)
    faults: list[Fault] = attrs.field(factory=list, init=False)
    # the plural of every resource a client has opened a watch on (e.g. "trainingjobs")
    watched: set[str] = attrs.field(factory=set, init=False)
    dry_runs: list[Any] = attrs.field(factory=list, init=False)  # bodies of dryRun=All writes

    # -- test controls ---------------------------------------------------------------

    def fail_next(
        self, match: Callable[[kmock.Request], bool], status: int, times: int = 1
    ) -> Fault:
        """Answer the next `times` requests for which `match(request)` with `status`."""
        fault = Fault(match, status, times)
        self.faults.append(fault)
        return fault

    async def expire_watches(self, resource: str) -> None:
        """Send `410 Gone` to every open watch of `resource` (e.g. "v1/pods")."""
        key = kmock.resource(resource)
        await self._buses[key].put({
            "type": "ERROR",
            "object": _status_body(410, "Expired", "too old resource version"),
        })

    async def send_bookmark(self, resource: str, kind: str, spec: dict[str, Any]) -> str:
        """Send a BOOKMARK at a new resourceVersion to every open watch of `resource`;
        returns that version."""
        version = str(next(self._versions))
        self.current_version = int(version)
        await self._buses[kmock.resource(resource)].put({"type": "BOOKMARK", "object": {
            "kind": kind, "apiVersion": "v1", "spec": spec,
            "metadata": {"resourceVersion": version, "creationTimestamp": None}}})
        return version

    # -- request handling --------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        for fault in self.faults:
            if fault.remaining > 0 and fault.match(request):
                fault.remaining -= 1
                fault.hits += 1
                return aiohttp.web.json_response(
                    _status_body(fault.status, "Injected", f"injected {fault.status}"),
                    status=fault.status, content_type="application/json",
                )
        if request.resource is not None:
            if request.params.get("dryRun") == "All" and isinstance(request.data, dict):
                return self._dry_run(request)
            if request.params.get("watch") == "true":
                self.watched.add(request.resource.plural)
            conflict = self._stamp(request)
            if conflict is not None:
                return conflict
            if self._is_apply(request) and self._missing(request):
                return await self._apply_create(request)
        return await super()._handle(request)

    def _dry_run(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """A dry-run write: answered as the API server would, nothing stored."""
        self.dry_runs.append(request.data)
        obj = dict(request.data)
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("name", f"{meta.get('generateName', 'dry-run-')}dryrn")
        meta.setdefault("namespace", request.namespace)
        obj["metadata"] = meta
        return aiohttp.web.json_response(obj, status=201, content_type="application/json")

    async def _apply_create(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """Server-side apply of an object that does not exist yet creates it."""
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key in self._objects:
                self._objects[key].create(request.data)  # it was deleted before
            else:
                self._objects[key] = request.data
            raw = self._objects[key].last.raw
            await self._buses[request.resource].put({"type": "ADDED", "object": raw})
        return aiohttp.web.json_response(raw, status=201, content_type="application/json")

    @staticmethod
    def _is_apply(request: kmock.Request) -> bool:
        content_type = request.headers.get("Content-Type", "")
        return request.method == kmock.method.PATCH and content_type.startswith(APPLY_CONTENT_TYPE)

    def _stored(self, request: kmock.Request) -> Any:
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects:
            return None
        obj = self._objects[key]
        return None if obj.deleted else obj

    def _missing(self, request: kmock.Request) -> bool:
        return self._stored(request) is None

    def _stamp(self, request: kmock.Request) -> aiohttp.web.StreamResponse | None:
        """Assign versions on writes; refuse a stale resourceVersion with 409."""
        action = request.action
        data = request.data
        creating = action == kmock.action.CREATE or (
            self._is_apply(request) and self._missing(request))
        if not isinstance(data, dict) or action not in {kmock.action.CREATE, kmock.action.UPDATE}:
            return None
        meta = data.setdefault("metadata", {})
        if creating:
            meta["uid"] = str(uuid.uuid4())
            meta["generation"] = 1
            meta["creationTimestamp"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if request.namespace and "namespace" not in meta:
                meta["namespace"] = request.namespace
        else:
            stored = self._stored(request)
            if stored is None:
                return None  # kmock answers 404
            current = dict(stored.get("metadata", {}))
            wanted = meta.get("resourceVersion")
            if wanted is not None and wanted != current.get("resourceVersion"):
                return aiohttp.web.json_response(
                    _status_body(409, "Conflict",
                                 "the object has been modified; please apply your changes "
                                 "to the latest version and try again"),
                    status=409, content_type="application/json")
            if "spec" in data and request.subresource is None:
                meta["generation"] = int(current.get("generation") or 1) + 1
            for immutable in ("uid", "creationTimestamp"):
                if immutable in current:
                    meta[immutable] = current[immutable]
        self.current_version = next(self._versions)
        meta["resourceVersion"] = str(self.current_version)
        return None

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        payload = await super()._serve_list(request)
        assert isinstance(payload, dict)
        payload["metadata"] = {"resourceVersion": str(self.current_version)}
        return payload


def declare_resources(emulator: kmock.KubernetesEmulator) -> None:
    for name, info in RESOURCES.items():
        emulator.resources[name] = info

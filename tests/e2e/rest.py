"""A few typed paths over the control plane's REST API, for test code acting as the admin.

Plain HTTPS + JSON (no client library) so that what the tests do to the cluster is
independent of the client code under test (edl's lightkube and kopf use).
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Iterable
from typing import Any

from e2e.control_plane import ControlPlane

# kind -> (group/version path prefix, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Service": ("/api/v1", "services", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Event": ("/api/v1", "events", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "LimitRange": ("/api/v1", "limitranges", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions",
                                 False),
    "TrainingJob": ("/apis/edl.dev/v1", "trainingjobs", True),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1",
                                  "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("/apis/admissionregistration.k8s.io/v1",
                                         "validatingadmissionpolicybindings", False),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices", True),
}
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer: `code` and the API server's Status message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Rest:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    @staticmethod
    def path(kind: str, namespace: str | None = None, name: str | None = None,
             sub: str | None = None) -> str:
        prefix, plural, namespaced = KINDS[kind]
        path = prefix + (f"/namespaces/{namespace}" if namespaced and namespace else "")
        path += f"/{plural}" + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")
        return path

    def call(self, method: str, path: str, body: Any = None, content_type: str = "") -> Any:
        try:
            return self.plane.request(method, path, body,
                                      content_type=content_type or "application/json")
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                message = json.loads(text).get("message", text)
            except ValueError:
                message = text
            raise ApiError(error.code, message) from None

    def get(self, kind: str, name: str, namespace: str | None = None,
            sub: str | None = None) -> dict[str, Any]:
        return self.call("GET", self.path(kind, namespace, name, sub))

    def find(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        try:
            return self.get(kind, name, namespace)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None = None,
             selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={selector}" if selector else ""
        return self.call("GET", self.path(kind, namespace) + query)["items"]

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        namespace = namespace or obj.get("metadata", {}).get("namespace")
        return self.call("POST", self.path(obj["kind"], namespace), obj)

    def merge(self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None,
              sub: str | None = None) -> dict[str, Any]:
        return self.call("PATCH", self.path(kind, namespace, name, sub), patch, MERGE)

    def delete(self, kind: str, name: str, namespace: str | None = None,
               propagation: str = "Background") -> None:
        try:
            self.call("DELETE", self.path(kind, namespace, name),
                      {"kind": "DeleteOptions", "apiVersion": "v1",
                       "propagationPolicy": propagation})
        except ApiError as error:
            if error.code != 404:
                raise

    def apply(self, docs: Iterable[dict[str, Any]], namespace: str | None = None) -> None:
        """Server-side apply each document (field manager e2e-admin), as `kubectl apply`."""
        for doc in docs:
            if not doc:
                continue
            meta = doc["metadata"]
            path = self.path(doc["kind"], meta.get("namespace") or namespace, meta["name"])
            self.call("PATCH", path + "?fieldManager=e2e-admin&force=true", doc, APPLY)

    def events_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [e for e in self.list("Event", namespace)
                if e.get("involvedObject", {}).get("name") == name]

"""deploy/rbac.yaml under the real RBAC authorizer: the controller's ServiceAccount may do
what its code calls and nothing else. (Every other e2e test runs the controller with this
ServiceAccount's token and fails on any 403 in its log.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.control_plane import ControlPlane
from e2e.rest import Rest

USER = "system:serviceaccount:edl-system:edl-controller"
ALLOWED = [
    ("", "nodes", "watch", "", ""), ("", "pods", "list", "", ""),
    ("batch", "jobs", "create", "team-a", ""), ("batch", "jobs", "patch", "team-a", ""),
    ("apps", "replicasets", "delete", "team-a", ""), ("", "services", "get", "team-a", ""),
    ("edl.dev", "trainingjobs", "watch", "", ""),
    ("", "events", "create", "team-a", ""),
    ("coordination.k8s.io", "leases", "patch", "edl-system", "edl-controller"),
    # edl's trainer controller runs the trainer pods and writes the trainer Job's status
    ("", "pods", "create", "team-a", ""), ("", "pods", "delete", "team-a", ""),
    ("batch", "jobs/status", "patch", "team-a", ""),
    # namespace quotas bound the plan (list + watch, all namespaces)
    ("", "resourcequotas", "list", "", ""), ("", "resourcequotas", "watch", "", ""),
]
DENIED = [
    ("", "secrets", "get", "team-a", ""), ("", "configmaps", "list", "", ""),
    ("", "pods", "update", "team-a", ""), ("", "pods/exec", "create", "team-a", ""),
    ("batch", "jobs", "list", "", ""), ("batch", "jobs", "update", "team-a", ""),
    ("edl.dev", "trainingjobs", "delete", "team-a", ""),
    ("coordination.k8s.io", "leases", "patch", "kube-system", "kube-scheduler"),
    ("coordination.k8s.io", "leases", "patch", "edl-system", "other-leader"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list", "", ""),
    ("", "resourcequotas", "update", "team-a", ""), ("", "resourcequotas", "delete", "team-a", ""),
    ("scheduling.k8s.io", "priorityclasses", "create", "", ""),
    # trainers name a ServiceAccount only when the job asks; the controller never makes one
    ("", "serviceaccounts", "create", "team-a", ""),
]


def allowed(rest: Rest, group: str, resource: str, verb: str, namespace: str,
            name: str) -> bool:
    review = rest.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": USER,
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:edl-system",
                            "system:authenticated"],
                 "resourceAttributes": {"group": group, "resource": resource.split("/")[0],
                                        "subresource": resource.partition("/")[2],
                                        "verb": verb, "namespace": namespace, "name": name}}})
    return bool(review["status"].get("allowed"))


@pytest.mark.parametrize("attrs", ALLOWED + DENIED)
def test_the_authorizer_follows_deploy_rbac_yaml(rest: Rest, attrs: tuple[str, ...]) -> None:
    assert allowed(rest, *attrs) == (attrs in ALLOWED)


def test_the_controller_token_is_refused_outside_its_grant(
        plane: ControlPlane, controller_kubeconfig: Path) -> None:

    def get(path: str) -> int:
        return plane.status_as(controller_kubeconfig, path)

    assert get("/api/v1/nodes") == 200
    assert get("/apis/edl.dev/v1/trainingjobs") == 200
    assert get("/api/v1/namespaces/kube-system/secrets") == 403
    assert get("/apis/batch/v1/jobs") == 403  # children are never listed

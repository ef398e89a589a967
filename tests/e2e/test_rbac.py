"""deploy/rbac.yaml under the real RBAC authorizer: the controller's ServiceAccount may do
what its code calls and nothing else; deploy/admission-policy.yaml under the real
admission: what it writes is edl's own, in namespaces an admin opted in. (Every other
e2e test runs the controller with this ServiceAccount's token and fails on any 403 in
its log.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.control_plane import ControlPlane
from e2e.helpers import Controller, trainingjob, wait_tj
from e2e.rest import MERGE, Rest
from polling import wait_until

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
    # what admission makes of trainer pods is asked again when these change
    ("", "limitranges", "list", "", ""), ("", "limitranges", "watch", "", ""),
    ("scheduling.k8s.io", "priorityclasses", "list", "", ""),
    ("scheduling.k8s.io", "priorityclasses", "watch", "", ""),
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
    ("scheduling.k8s.io", "priorityclasses", "get", "", "system-cluster-critical"),
    ("", "limitranges", "create", "team-a", ""), ("", "limitranges", "get", "team-a", "x"),
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


# -- deploy/admission-policy.yaml: real writes with the controller's own token ------------

def _pod(name: str, namespace: str, *, labels: dict[str, str] | None = None,
         owner: dict[str, Any] | None = None, created_by: bool = False,
         service_account: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    if created_by:
        meta["annotations"] = {"edl.dev/created-by": "trainer-controller"}
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "example.com/img"}]}
    if service_account:
        spec["serviceAccountName"] = service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _as_controller(plane: ControlPlane, kubeconfig: Path) -> Callable[..., tuple[int, str]]:
    def call(method: str, path: str, body: Any = None, content_type: str = "") -> tuple[int, str]:
        return plane.call_as(kubeconfig, method, path, body,
                             content_type or "application/json")
    return call


def test_the_controller_token_writes_no_pod_outside_its_jobs(
        plane: ControlPlane, rest: Rest, controller_kubeconfig: Path, namespace: str) -> None:
    call = _as_controller(plane, controller_kubeconfig)
    # a trainer Job the way edl makes it (managedBy: kube-controller-manager leaves it)
    job = rest.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "t-trainer", "labels": {"edl.dev/job": "t", "edl.dev/role": "trainer"}},
        "spec": {"managedBy": "edl.dev/trainer-controller", "suspend": True,
                 "template": {"metadata": {"labels": {"edl.dev/job": "t"}}, "spec": {
                     "restartPolicy": "Never",
                     "containers": [{"name": "trainer", "image": "example.com/img"}]}}}},
        namespace)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "t-trainer",
             "uid": job["metadata"]["uid"], "controller": True}
    marks = {"edl.dev/job": "t", "edl.dev/role": "trainer"}
    pods = Rest.path("Pod", namespace)

    def refused(status: tuple[int, str], words: str) -> None:
        assert status[0] == 403 and words in status[1], status

    # the policy takes effect a moment after it is created (first test of a session)
    wait_until(lambda: call("POST", Rest.path("Pod", "kube-system"),
                            _pod("plain", "kube-system"))[0] == 403, 30,
               "a plain pod in kube-system refused")
    refused(call("POST", Rest.path("Pod", "kube-system"),
                 _pod("x", "kube-system", labels=marks, owner=owner, created_by=True)),
            "namespace kube-system is not served by edl")
    refused(call("POST", pods, _pod("plain", namespace)), "is not an edl trainer pod")
    for account in ("admin", "trainer"):  # both exist: only the policy tells them apart
        rest.create({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": account}}, namespace)
    refused(call("POST", pods, _pod("x", namespace, labels=marks, owner=owner,
                                    created_by=True, service_account="admin")),
            "not as admin")
    assert call("POST", pods, _pod("t-a", namespace, labels=marks, owner=owner,
                                   created_by=True))[0] == 201
    path = Rest.path("Pod", namespace, "t-a")
    # edl's own mark: allowed; anything else on the pod: refused
    assert call("PATCH", path, {"metadata": {"annotations": {"edl.dev/counted": "true"}}},
                MERGE)[0] == 200
    refused(call("PATCH", path, [{"op": "replace", "path": "/spec/containers/0/image",
                                  "value": "example.com/other"}],
                 "application/json-patch+json"), "only its own marks on a pod")
    refused(call("PATCH", path, {"metadata": {"labels": {"app": "x"}}}, MERGE),
            "only its own marks on a pod")
    # a ServiceAccount the admin lists for the namespace may be named
    rest.merge("Namespace", namespace,
               {"metadata": {"annotations": {"edl.dev/service-accounts": "reader, trainer"}}})
    assert call("POST", pods, _pod("t-b", namespace, labels=marks, owner=owner,
                                   created_by=True, service_account="trainer"))[0] == 201
    # a trainer-shaped pod edl did not create (a kube-controller-manager's, version skew):
    # its tracking finalizer may be released, nothing else changed
    skewed = _pod("t-kcm", namespace, labels=marks, owner=owner)
    skewed["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    rest.create(skewed, namespace)
    skewed_path = Rest.path("Pod", namespace, "t-kcm")
    refused(call("PATCH", skewed_path, {"metadata": {"labels": {"app": "x"}}}, MERGE),
            "only its own marks on a pod")
    assert call("PATCH", skewed_path, {"metadata": {"finalizers": None}}, MERGE)[0] == 200
    # a pod that is not edl's cannot be deleted; a trainer pod can
    rest.create(_pod("theirs", namespace), namespace)
    refused(call("DELETE", Rest.path("Pod", namespace, "theirs")), "not an edl trainer pod")
    assert call("DELETE", path)[0] == 200
    # a namespace the admin has not opted in: nothing, not even edl's own kind of pod
    rest.merge("Namespace", namespace, {"metadata": {"labels": {"edl.dev/served": None}}})
    wait_until(lambda: call("POST", pods, _pod("t-c", namespace, labels=marks, owner=owner,
                                               created_by=True))[0] == 403, 30,
               "a trainer pod in an unserved namespace refused")
    refused(call("POST", pods, _pod("t-c", namespace, labels=marks, owner=owner,
                                    created_by=True)),
            f"namespace {namespace} is not served by edl")


def test_the_controller_token_writes_only_children_of_trainingjobs(
        plane: ControlPlane, rest: Rest, controller_kubeconfig: Path, namespace: str) -> None:
    call = _as_controller(plane, controller_kubeconfig)
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "theirs"},
               "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]}}
    rest.create(service, namespace)
    path = Rest.path("Service", namespace, "theirs")

    def refused(status: tuple[int, str]) -> None:
        assert status[0] == 403 and "is not owned by a TrainingJob" in status[1], status

    # re-pointing a foreign Service, or claiming it with edl's marks, is refused
    wait_until(lambda: call("PATCH", path, {"spec": {"selector": {"app": "mine"}}},
                            MERGE)[0] == 403, 30, "a foreign Service patch refused")
    refused(call("PATCH", path, {"spec": {"selector": {"app": "mine"}}}, MERGE))
    tj = {"apiVersion": "edl.dev/v1", "kind": "TrainingJob", "name": "t", "uid": "0" * 36,
          "controller": True}
    refused(call("PATCH", path, {"metadata": {"labels": {"edl.dev/job": "t"},
                                              "ownerReferences": [tj]}}, MERGE))
    refused(call("DELETE", path))
    refused(call("POST", Rest.path("Service", namespace),
                 {**service, "metadata": {"name": "new"}}))
    rest.create({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "theirs"},
                 "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "theirs"}},
                          "template": {"metadata": {"labels": {"app": "theirs"}}, "spec": {
                              "containers": [{"name": "c", "image": "example.com/img"}]}}}},
                namespace)
    refused(call("PATCH", Rest.path("ReplicaSet", namespace, "theirs"),
                 {"spec": {"replicas": 3}}, MERGE))
    refused(call("DELETE", Rest.path("ReplicaSet", namespace, "theirs")))
    # a child of a TrainingJob (its ownerReference and label) is written
    owned = {**service, "metadata": {"name": "t-master", "labels": {"edl.dev/job": "t"},
                                     "ownerReferences": [tj]}}
    assert call("POST", Rest.path("Service", namespace), owned)[0] == 201


def test_a_job_in_a_namespace_edl_does_not_serve_says_why_in_its_status(
        plane: ControlPlane, rest: Rest, controller_kubeconfig: Path, namespace: str,
        start_controller: Callable[..., Controller]) -> None:
    call = _as_controller(plane, controller_kubeconfig)
    rest.merge("Namespace", namespace, {"metadata": {"labels": {"edl.dev/served": None}}})
    wait_until(lambda: call("POST", Rest.path("Service", namespace), {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "probe"},
        "spec": {"ports": [{"port": 80}]}})[0] == 403, 30, "the namespace no longer served")
    controller = start_controller("replica-a")
    start = controller.offset()
    rest.create(trainingjob("unserved", min_instance=2, max_instance=2), namespace)
    tj = wait_tj(rest, namespace, "unserved",
                 lambda t: t if "is not served by edl" in t["status"]["message"] else None, 60,
                 "the refusal in the status")
    assert "edl.dev/served=true" in tj["status"]["message"]  # what the admin does about it
    assert rest.list("Pod", namespace) == []
    assert rest.find("Job", "unserved-trainer", namespace) is None
    controller.stop()
    controller.excused.append((start, controller.offset()))  # the refusals were the point

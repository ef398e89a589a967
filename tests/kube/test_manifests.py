"""Every manifest in deploy/ passes kubernetes-validate (strict: unknown fields are errors)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = sorted((ROOT / "deploy").glob("*.yaml"))
# kinds outside Kubernetes' own schemas, and the tests that check them
CHECKED_ELSEWHERE = {
    "kustomize.config.k8s.io/v1beta1": "rendered by kubectl in e2e/test_kustomize.py",
    "monitoring.coreos.com/v1": "kube/test_monitoring.py",
}


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, desired_version="1.30.0", strict=True)


@pytest.mark.parametrize("path", DEPLOY, ids=[p.name for p in DEPLOY])
def test_deploy_manifest_is_valid(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents
    for doc in documents:
        if doc["apiVersion"] == "edl.dev/v1":
            continue  # a TrainingJob: checked against the CRD schema in test_crd.py
        if doc["apiVersion"] in CHECKED_ELSEWHERE:
            continue  # no Kubernetes schema: see CHECKED_ELSEWHERE
        validate(doc)


def _grants(role: dict) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_rbac_is_least_privilege() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/rbac.yaml").read_text()))
    cluster_wide = _grants(next(d for d in docs if d["kind"] == "ClusterRole"))
    read = {"get", "list", "watch"}
    managed = {"get", "create", "patch", "delete"}  # server-side apply = create + patch
    assert cluster_wide == {
        ("", "nodes"): read,
        # trainer pods (managed trainer Job): patch marks a finished one counted
        ("", "pods"): read | {"create", "delete", "patch"},
        ("", "resourcequotas"): {"list", "watch"},  # namespace quotas bound the plan
        # a change to either asks again what admission makes of trainer pods
        ("", "limitranges"): {"list", "watch"},
        ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
        ("batch", "jobs"): managed,
        ("batch", "jobs/status"): {"patch"},
        # blockOwnerDeletion under OwnerReferencesPermissionEnforcement
        ("batch", "jobs/finalizers"): {"update"},
        ("edl.dev", "trainingjobs/finalizers"): {"update"},
        ("apps", "replicasets"): managed,
        ("", "services"): managed,
        ("edl.dev", "trainingjobs"): read | {"patch"},
        ("edl.dev", "trainingjobs/status"): {"get", "patch"},
        ("", "events"): {"create"},
    }
    # The leader Lease: only in the controller's namespace, get/patch only by name.
    leader = next(d for d in docs if d["kind"] == "Role")
    assert leader["metadata"]["namespace"] == "edl-system"
    by_name = [r for r in leader["rules"] if r.get("resourceNames")]
    assert by_name == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                        "resourceNames": ["edl-controller"], "verbs": ["get", "patch"]}]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == leader["metadata"]["name"]
    controller = (ROOT / "deploy/controller.yaml").read_text()
    assert "--lease-namespace=$(POD_NAMESPACE)" in controller
    assert "namespace: edl-system" in controller


def test_invalid_manifest_is_caught() -> None:
    # The check itself must be able to fail.
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"replicas": "two", "selector": {}, "template": {}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


def test_the_admission_policy_binds_to_the_controllers_service_account() -> None:
    """deploy/admission-policy.yaml judges the ServiceAccount deploy/rbac.yaml binds, and
    denies (a binding without Deny would only warn or audit)."""
    rbac = list(yaml.safe_load_all((ROOT / "deploy/rbac.yaml").read_text()))
    account = next(d for d in rbac if d["kind"] == "ServiceAccount")["metadata"]
    policy, binding = yaml.safe_load_all((ROOT / "deploy/admission-policy.yaml").read_text())
    (condition,) = policy["spec"]["matchConditions"]
    username = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert condition["expression"] == f"request.userInfo.username == '{username}'"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}
    written = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    granted = _grants(next(d for d in rbac if d["kind"] == "ClusterRole"))
    writable = {key for key, verbs in granted.items()
                if verbs & {"create", "patch", "update", "delete"}
                and key[1].split("/")[0] in {"pods", "services", "replicasets", "jobs"}
                and not key[1].endswith("/finalizers")}
    assert writable <= written  # every pod/child write RBAC allows is judged

"""Every manifest in deploy/ passes kubernetes-validate (strict: unknown fields are errors)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = sorted((ROOT / "deploy").glob("*.yaml"))


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, desired_version="1.30.0", strict=True)


@pytest.mark.parametrize("path", DEPLOY, ids=[p.name for p in DEPLOY])
def test_deploy_manifest_is_valid(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents
    for doc in documents:
        if doc["apiVersion"] == "edl.dev/v1":
            continue  # a TrainingJob: checked against the CRD schema in test_crd.py
        validate(doc)


def test_rbac_is_least_privilege() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }
    read = {"get", "list", "watch"}
    assert granted[("", "nodes")] == read
    assert granted[("", "pods")] == read
    assert "*" not in {v for verbs in granted.values() for v in verbs}
    assert not any(resource in {"secrets", "configmaps"} for _, resource in granted)
    assert ("", "pods") in granted and "create" not in granted[("", "pods")]
    assert granted[("coordination.k8s.io", "leases")] >= {"get", "create", "update"}
    assert granted[("", "events")] >= {"create"}
    for child in (("batch", "jobs"), ("apps", "replicasets"), ("", "services")):
        assert granted[child] >= {"create", "patch", "delete"}


def test_invalid_manifest_is_caught() -> None:
    # The check itself must be able to fail.
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"replicas": "two", "selector": {}, "template": {}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)

"""Pod Security `restricted` on the real control plane (issue 20): a namespace enforcing it
runs a TrainingJob, every pod edl creates is admitted, and job pods carry no API token.

kube-apiserver runs its default admission plugins, PodSecurity among them (control_plane.py
disables only TaintNodesByCondition); the first check proves it enforces in this namespace.
"""

from __future__ import annotations

import pytest

from e2e.helpers import trainer_pods, trainingjob, wait_tj
from e2e.rest import ApiError, Rest
from pod_security import restricted_violations
from polling import wait_until

PSA = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn")}
CLASS = "edl-elastic-trainer"  # deploy/priorityclass.yaml, applied by install_edl


def _running(rest: Rest, namespace: str, role: str) -> list[dict]:
    return [p for p in rest.list("Pod", namespace, f"edl.dev/job=secure,edl.dev/role={role}")
            if p.get("status", {}).get("phase") == "Running"]


def test_a_trainingjob_runs_in_a_namespace_enforcing_restricted(
        rest: Rest, namespace: str, start_controller) -> None:
    rest.merge("Namespace", namespace, {"metadata": {"labels": PSA}})
    # the admission plugin enforces here: a pod with no securityContext is refused
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
    with pytest.raises(ApiError) as refused:
        rest.create(bare, namespace)
    assert refused.value.code == 403 and "restricted" in refused.value.message

    start_controller("psa", f"--trainer-priority-class={CLASS}")
    job = trainingjob("secure", min_instance=2, max_instance=3)
    job["spec"]["master"]["nodeSelector"] = {"type": "kwok"}
    rest.create(job, namespace)
    wait_tj(rest, namespace, "secure",
            lambda t: t["status"]["state"] == "Running" and t["status"]["trainers"]["running"] >= 2,
            120, "secure Running with its trainers")
    wait_until(lambda: len(_running(rest, namespace, "master")) == 1
               and len(_running(rest, namespace, "pserver")) == 2, 60, "master and pservers")
    assert len(trainer_pods(rest, namespace, "secure")) >= 2

    pods = rest.list("Pod", namespace, "edl.dev/job=secure")
    assert {p["metadata"]["labels"]["edl.dev/role"] for p in pods} == {
        "master", "pserver", "trainer"}
    for pod in pods:
        name, spec = pod["metadata"]["name"], pod["spec"]
        template = {"metadata": pod["metadata"], "spec": spec}
        assert restricted_violations(template) == {}, name
        # no API token: no kube-api-access projected volume was injected
        assert spec["automountServiceAccountToken"] is False, name
        assert not [v for v in spec.get("volumes", []) if v["name"].startswith("kube-api-access")]
        role = pod["metadata"]["labels"]["edl.dev/role"]
        if role == "trainer":  # the controller's default class, resolved by the API server
            assert (spec["priorityClassName"], spec["priority"]) == (CLASS, -10), name
            assert spec["preemptionPolicy"] == "Never"
        else:
            assert "priorityClassName" not in spec and spec.get("priority", 0) == 0, name
    master = next(p for p in pods if p["metadata"]["labels"]["edl.dev/role"] == "master")
    assert master["spec"]["nodeSelector"] == {"type": "kwok"}
    etcd = next(c for c in master["spec"]["containers"] if c["name"] == "etcd")
    assert etcd["securityContext"]["runAsUser"] == 65532
    # no pod was refused: the ReplicaSets report no ReplicaFailure
    for name in ("secure-master", "secure-pserver"):
        conditions = rest.get("ReplicaSet", name, namespace)["status"].get("conditions") or []
        assert not [c for c in conditions if c["type"] == "ReplicaFailure"], conditions

"""Two installations of edl on one cluster (issue 29 item 5): each runs only the
TrainingJobs its name is given by (label edl.dev/installation; the default one runs those
without it), stamps its name in the trainer Job's spec.managedBy and its pods' created-by
mark, and leaves the other's job alone with one log line."""

from __future__ import annotations

from e2e.helpers import SYSTEM_NAMESPACE, trainingjob, wait_tj, wait_trainers
from e2e.rest import Rest
from edl.jobparser import JobParser
from polling import wait_until

LEASE = "edl-team-b"


def second_installation_lease(rest: Rest) -> None:
    """The Role an admin adds for a second installation's Lease (same ServiceAccount)."""
    rest.apply([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": LEASE, "namespace": SYSTEM_NAMESPACE},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": [LEASE], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": LEASE, "namespace": SYSTEM_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LEASE},
         "subjects": [{"kind": "ServiceAccount", "name": "edl-controller",
                       "namespace": SYSTEM_NAMESPACE}]}])


def test_two_installations_each_run_only_their_own_jobs(
        rest: Rest, namespace: str, start_controller) -> None:
    second_installation_lease(rest)
    default = start_controller("replica-a")
    team_b = start_controller("team-b", "--installation=team-b", f"--lease-name={LEASE}")
    rest.create(trainingjob("mine", min_instance=2, max_instance=2), namespace)
    theirs = trainingjob("theirs", min_instance=2, max_instance=2)
    theirs["metadata"]["labels"] = {"edl.dev/installation": "team-b"}
    rest.create(theirs, namespace)
    for job in ("mine", "theirs"):
        wait_trainers(rest, namespace, job, 2)
        wait_tj(rest, namespace, job, lambda t: t["status"]["state"] == "Running")
    for job, name in (("mine", "trainer-controller"), ("theirs", "team-b")):
        trainer_job = rest.get("Job", f"{job}-trainer", namespace)
        assert trainer_job["spec"]["managedBy"] == f"edl.dev/{name}"
        pods = rest.list("Pod", namespace, f"edl.dev/job={job},edl.dev/role=trainer")
        assert {p["metadata"]["annotations"]["edl.dev/created-by"] for p in pods} == {name}
    wait_until(lambda: f"TrainingJob {namespace}/theirs is run by installation team-b"
               in default.text(), 30, "the default installation leaves theirs alone")
    wait_until(lambda: f"TrainingJob {namespace}/mine is run by installation "
               "trainer-controller" in team_b.text(), 30, "team-b leaves mine alone")
    assert f"{namespace}/theirs" not in " ".join(
        line for line in default.text().splitlines() if "left alone" not in line)


def test_a_trainer_job_another_installation_runs_is_left_alone_with_a_status_line(
        rest: Rest, namespace: str, start_controller) -> None:
    """The job's label says this installation, but its trainer Job (say, made before the
    job moved) names another in spec.managedBy: no pod is made, the status says why."""
    tj = rest.create(trainingjob("moved", min_instance=2, max_instance=2), namespace)
    trainer = JobParser().parse_to_trainer(tj)
    trainer["spec"]["managedBy"] = "edl.dev/team-b"
    rest.create(trainer, namespace)
    start_controller("replica-a")
    wanted = ("trainer Job moved-trainer is run by edl installation team-b (spec.managedBy "
              "edl.dev/team-b), not by this one (trainer-controller): edl leaves it alone")
    wait_tj(rest, namespace, "moved", lambda t: wanted in t["status"]["message"], 60,
            "the status line")
    assert rest.list("Pod", namespace, "edl.dev/job=moved,edl.dev/role=trainer") == []
    assert any(e["reason"] == "AnotherInstallation" for e in rest.events_for(namespace, "moved"))

"""The README's walkthrough, steps 2-5, on the real control plane.

Cluster: 4 kwok nodes x 4 CPU. The job: the shipped example (`digits-cluster`), trainers
500m, 2..6. The filler Deployment's pause pods (500m each) number what the README's
step 4 computes from the nodes' allocatable CPU (2.5 per CPU: 40 here, 20 CPU for 16),
so they overflow the cluster and the job must shrink to its guarantee; removing them
lets it grow back. The README's commands are read from README.md, so the test and the
page cannot drift apart.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request

from e2e.control_plane import ROOT, ControlPlane
from e2e.helpers import (
    SYSTEM_NAMESPACE,
    filler,
    parallelism,
    trainer_pods,
    trainingjob,
    wait_tj,
    wait_trainers,
)
from e2e.rest import Rest
from polling import wait_until

JOB = "digits-cluster"
CHILDREN = (("Service", f"{JOB}-master"), ("ReplicaSet", f"{JOB}-master"),
            ("ReplicaSet", f"{JOB}-pserver"), ("Job", f"{JOB}-trainer"))


def conditions(tj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in tj["status"]["conditions"]}


def readme_step(number: int) -> str:
    """The shell blocks of the README's Kubernetes walkthrough step `number`."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"**{number}. ")
    end = text.find(f"**{number + 1}. ", start)
    return "\n".join(re.findall(r"```sh\n(.*?)```", text[start:end if end > 0 else None],
                                re.S))


def readme_fill(rest: Rest) -> int:
    """Step 4's FILL: its own awk program over the nodes' allocatable CPU, printed one per
    line as its `kubectl get nodes -o jsonpath=...` does."""
    (program,) = re.findall(r"\| (awk '.*?')\)", readme_step(4))
    cpus = "".join(n["status"]["allocatable"]["cpu"] + "\n" for n in rest.list("Node"))
    done = subprocess.run(["sh", "-c", program], input=cpus, capture_output=True, text=True,
                          check=True, timeout=30)
    return int(done.stdout)


def table_cell(plane: ControlPlane, namespace: str, column: str) -> object:
    """`kubectl get tj JOB`'s cell in `column` (the API server's Table for the CRD)."""
    request = urllib.request.Request(
        plane.url + Rest.path("TrainingJob", namespace, JOB),
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    with urllib.request.urlopen(request, context=plane.ssl_context(), timeout=30) as answer:
        table = json.loads(answer.read())
    names = [c["name"] for c in table["columnDefinitions"]]
    return table["rows"][0]["cells"][names.index(column)]


def test_readme_walkthrough(rest: Rest, plane: ControlPlane, namespace: str,
                            start_controller) -> None:
    # Step 2: the controller, as the ServiceAccount of deploy/rbac.yaml, takes the Lease.
    # (the namespace fixture carries the label step 2 tells the admin to set)
    assert "kubectl label namespace default edl.dev/served=true" in readme_step(2)
    controller = start_controller("replica-a")
    wait_until(lambda: (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
               .get("spec", {}).get("holderIdentity") == "replica-a", 60, "the Lease")

    # Step 3: a job becomes its children, owned by the TrainingJob.
    assert f"kubectl get tj {JOB} -w" in readme_step(3)
    tj = rest.create(trainingjob(JOB), namespace)
    uid = tj["metadata"]["uid"]
    for kind, name in CHILDREN:
        child = wait_until(lambda k=kind, n=name: rest.find(k, n, namespace), 60, name)
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainingJob", JOB, uid)
        assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
        assert child["metadata"]["labels"]["edl.dev/job"] == JOB
    # the ReplicaSet controller makes the pserver pods in its own time
    wait_until(lambda: len(rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=pserver"))
               == 2, 60, "two pserver pods")

    # The empty cluster has room: the autoscaler grows the job to max-instance.
    wait_trainers(rest, namespace, JOB, 6)
    tj = wait_tj(rest, namespace, JOB,
                 lambda t: t if t["status"]["trainers"]["running"] == 6 else None)
    assert tj["status"]["state"] == "Running"
    assert tj["status"]["observedGeneration"] == 1 and tj["status"]["replicas"] == 6
    assert conditions(tj)["Ready"][0] == "True"
    assert conditions(tj)["Failed"][0] == "False"
    assert conditions(tj)["Complete"] == ("False", "NotFinished")  # what `kubectl wait` reads
    assert f"kubectl wait --for=condition=Complete tj/{JOB}" in readme_step(3)
    assert "waiting" not in tj["status"]  # nothing missing: the WAITING column is empty
    scaled = [e for e in rest.events_for(namespace, JOB) if e["reason"] == "ScalingUp"]
    assert scaled and "vs max_load_desired 0.97" in scaled[-1]["message"]
    assert "-> 6" in " ".join(e["message"] for e in scaled)

    # Step 4: a filler Deployment of the README's size overflows the cluster; the job
    # shrinks to min-instance...
    fill = readme_fill(rest)
    assert fill == 40  # 4 nodes x 4 CPU x 2.5: 20 CPU of pause pods for 16
    filler(rest, namespace, fill)
    wait_trainers(rest, namespace, JOB, 2, timeout=120)
    wait_until(lambda: any(e["reason"] == "ScalingDown"
                           for e in rest.events_for(namespace, JOB)), 30, "ScalingDown")
    # ... and grows back once the filler is gone.
    filler(rest, namespace, 0)
    wait_trainers(rest, namespace, JOB, 6, timeout=120)

    # `kubectl scale tj digits-cluster --replicas=4` guarantees 4 (min-instance); with room
    # the job keeps its 6, and /scale says both: spec.replicas 4, status.replicas 6.
    assert f"kubectl scale tj {JOB} --replicas=4" in readme_step(4)
    rest.merge("TrainingJob", JOB, {"spec": {"replicas": 4}}, namespace, sub="scale")
    assert rest.get("TrainingJob", JOB, namespace)["spec"]["trainer"]["min-instance"] == 4
    wait_tj(rest, namespace, JOB, lambda t: t["status"]["observedGeneration"] == 2)
    scale = rest.get("TrainingJob", JOB, namespace, sub="scale")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (4, 6)
    assert table_cell(plane, namespace, "Min") == 4
    assert table_cell(plane, namespace, "Desired") == 6
    filler(rest, namespace, fill)
    wait_trainers(rest, namespace, JOB, 4, timeout=120)
    wait_until(lambda: len(rest.list("Pod", namespace, "app=filler")) == fill, 30,
               f"{fill} filler pods")
    assert parallelism(rest, namespace, JOB) == 4

    # A guarantee the full cluster cannot keep: the WAITING column says what is missing.
    rest.merge("TrainingJob", JOB, {"spec": {"replicas": 6}}, namespace, sub="scale")
    waiting = "2 trainers unscheduled (no node fits yet)"
    wait_tj(rest, namespace, JOB, lambda t: t["status"].get("waiting") == waiting, 60,
            f"status.waiting {waiting!r}")
    assert table_cell(plane, namespace, "Waiting") == waiting
    rest.merge("TrainingJob", JOB, {"spec": {"replicas": 4}}, namespace, sub="scale")
    wait_trainers(rest, namespace, JOB, 4, timeout=120)
    wait_tj(rest, namespace, JOB, lambda t: "waiting" not in t["status"], 60, "nothing waits")

    # Step 5: metrics, then clean up as the README does: the filler, then the job --
    # deleted with the controller stopped: the garbage collector alone must remove every
    # child and the master's and pservers' pods; the trainer pods keep edl's tracking
    # finalizer until a controller runs again, which releases them at once.
    url = f"http://127.0.0.1:{controller.port}/metrics"

    def desired_metric() -> str:
        """The gauge follows the TrainingJob's status (refreshed each second), so it may
        trail the Job's parallelism by a moment."""
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        lines = [line for line in text.splitlines()
                 if line.startswith("edl_job_trainers_desired{") and f'job="{JOB}"' in line
                 and f'namespace="{namespace}"' in line]
        return text if lines and lines[0].endswith(" 4.0") else ""
    metrics = wait_until(desired_metric, 30, f"edl_job_trainers_desired 4 for {JOB}")
    assert "edl_leader 1.0" in metrics
    decisions = re.findall(r'^edl_scale_decisions_total\{kind="(\w+)"\}', metrics, re.M)
    assert sorted(decisions) == ["grow", "hold", "shrink"]  # bounded: never the reason text
    controller.stop()
    cleanup = readme_step(5)
    assert "kubectl delete deployment filler" in cleanup and f"kubectl delete tj {JOB}" in cleanup
    rest.delete("Deployment", "filler", namespace)
    rest.delete("TrainingJob", JOB, namespace)
    for kind, name in CHILDREN:
        wait_until(lambda k=kind, n=name: rest.find(k, n, namespace) is None, 60,
                   f"{kind} {name} garbage-collected")
    wait_until(lambda: not [p for p in rest.list("Pod", namespace, f"edl.dev/job={JOB}")
                            if p["metadata"]["labels"].get("edl.dev/role") != "trainer"],
               60, "the master's and pservers' pods removed")
    held = rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
    assert held and all(p["metadata"].get("deletionTimestamp")
                        and p["metadata"]["finalizers"] == ["edl.dev/job-tracking"]
                        for p in held)
    start_controller("replica-b")  # releases the orphans' finalizers
    wait_until(lambda: not rest.list("Pod", namespace, f"edl.dev/job={JOB}"), 60,
               "the job's pods removed")
    wait_until(lambda: not rest.list("Pod", namespace, "app=filler"), 60, "the filler removed")
    assert trainer_pods(rest, namespace, JOB) == []
    # the uninstall keeps the CRD (and so every TrainingJob) unless asked, with a warning
    uninstall = (ROOT / "README.md").read_text().split("To uninstall edl")[1]
    first, second = uninstall.split("kubectl get tj -A")
    assert "deploy/crd.yaml" not in first
    assert "deletes every TrainingJob in every namespace" in first
    assert "kubectl delete -f deploy/crd.yaml" in second

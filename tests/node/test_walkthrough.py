"""Issue 30, case 6: the README's Kubernetes walkthrough, step by step, on the real node,
with edl's controller running in the cluster as deploy/controller.yaml says (two replicas,
its ServiceAccount's RBAC, the admission policy, in-cluster config through the `kubernetes`
Service, leader election on its Lease).

Every step's commands are read from README.md and run in order with kubectl, as an admin
types them. What differs here, and only this (`here()` asserts each still matches the
README, so the page and the test cannot drift apart):

* step 1: no docker, kind or registry: tools/node/images.py builds the two images and the
  node imports them under the README's names (`ctr images tag`, as `kind load` does), and
  the etcd sidecar's and the filler's images likewise;
* the README's `default` namespace is the test's fresh one (the kubeconfig's namespace);
* the controller's Deployment comes from deploy/ (the kustomize base) through an overlay
  adding the runtime's read-only volumes (the images mount the Python install,
  tools/node/images.py), and the example job file gets the same volumes and twice its
  passes (its 15 left about 15 s between step 4's regrowth and the job's end at load 1-8:
  the test must see the job shrink and grow back before it finishes);
* `kubectl get tj -w` runs once without `-w`; port-forward takes a free local port.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ROOT
from e2e.helpers import SYSTEM_NAMESPACE, load_yaml, parallelism, trainer_pods, wait_tj
from e2e.test_doc_commands import sh
from e2e.test_walkthrough import CHILDREN, JOB, readme_step
from node.cluster import (
    NodeCluster,
    controller_overlay,
    pod_log,
    runtime_claims,
    runtime_volumes,
)
from node.node import PAUSE_IMAGE
from polling import wait_until

PAUSE_UID = 65535  # the pod's sandbox (tools/node/images.py's pause image)
CONTROLLER = "app.kubernetes.io/name=edl,app.kubernetes.io/component=controller"


def commands(step: int) -> list[str]:
    """The shell commands of README step `step`, one per command: continuation lines
    joined, comments dropped."""
    found = []
    for line in readme_step(step).replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+# .*$", "", line).strip()
        if line and not line.startswith("#"):
            found.append(line)
    return found


def readme_images() -> dict[str, str]:
    """Step 1's image names: Dockerfile -> the tag `docker build -t` gives it; and the
    etcd sidecar image the README says a job's pods pull."""
    text = "\n".join(commands(1))
    names = dict(re.findall(r"docker build -f deploy/(Dockerfile\.\w+)\s+-t (\S+)", text))
    text = (ROOT / "README.md").read_text()
    prose = text[text.index("**1. "):text.index("**2. ")]
    (etcd,) = set(re.findall(r"`(quay\.io/coreos/etcd:[^`\s]+)`", prose))
    return {**names, "etcd": etcd}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Admin:
    """An admin at a shell: each README command run as written, after `here()`."""

    def __init__(self, kubeconfig: Path, substitutions: dict[str, str]) -> None:
        self.kubeconfig = kubeconfig
        self.substitutions = substitutions
        self.used: set[str] = set()
        self.variables: dict[str, str] = {}

    def here(self, command: str) -> str:
        for old, new in self.substitutions.items():
            if old in command:
                command = command.replace(old, new)
                self.used.add(old)
        return command

    def run(self, command: str, timeout: float = 60) -> str:
        done = sh(self.here(command), self.kubeconfig, timeout=timeout, **self.variables)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        return done.stdout


def lease_holder(admin: Admin, command: str) -> str:
    """HOLDER of `kubectl get lease` (its second column); '' while there is none."""
    lines = _ok(admin, command).splitlines()
    if len(lines) < 2:
        return ""
    assert lines[0].split()[:2] == ["NAME", "HOLDER"], lines
    holder = lines[1].split()[1]
    return "" if holder == "<none>" else holder


def controller_pods(cluster: NodeCluster) -> list[dict[str, Any]]:
    return [p for p in cluster.rest.list("Pod", SYSTEM_NAMESPACE, CONTROLLER)
            if not p["metadata"].get("deletionTimestamp")]


def example_job(cluster: NodeCluster, namespace: str, path: Path) -> Path:
    """deploy/example-trainingjob.yaml in `namespace`, with the runtime's volumes."""
    (job,) = load_yaml("example-trainingjob.yaml")
    job["metadata"]["namespace"] = namespace
    job["spec"]["volumes"], job["spec"]["volumeMounts"] = runtime_volumes(cluster)
    job["spec"]["passes"] = 2 * int(job["spec"]["passes"])
    path.write_text(yaml.safe_dump(job))
    return path


def events(cluster: NodeCluster, namespace: str, reason: str) -> list[str]:
    return [e["message"] for e in cluster.rest.events_for(namespace, JOB)
            if e["reason"] == reason]


def test_the_readme_walkthrough_on_the_node_with_the_controller_in_the_cluster(
        node_cluster: NodeCluster, namespace: str, tmp_path: Path) -> None:
    cluster, rest = node_cluster, node_cluster.rest
    # Step 1: the images, under the README's names (`kind load`'s part)
    names = readme_images()
    for built, name in ((cluster.controller_image, names["Dockerfile.controller"]),
                        (cluster.image, names["Dockerfile.runtime"]),
                        (cluster.etcd_image, names["etcd"])):
        cluster.node.tag_image(built, name)
    (pause,) = set(re.findall(r"--image=(\S+)", "\n".join(commands(4))))
    cluster.node.tag_image(PAUSE_IMAGE, pause)

    # the admin labels the namespace in step 2: it starts unserved
    rest.merge("Namespace", namespace, {"metadata": {"labels": {"edl.dev/served": None}}})
    pki = cluster.plane.pki
    assert pki is not None
    kubeconfig = cluster.plane.write_kubeconfig(
        tmp_path / "admin.kubeconfig", namespace=namespace,
        user={"client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)})
    port = free_port()
    admin = Admin(kubeconfig, {
        "namespace default": f"namespace {namespace}",
        "-f deploy/controller.yaml": f"-k {controller_overlay(cluster, tmp_path / 'overlay')}",
        "-f deploy/example-trainingjob.yaml":
            f"-f {example_job(cluster, namespace, tmp_path / 'job.yaml')}",
        f"{JOB} -w": JOB,
        " 8080 &": f" {port}:8080",
        "localhost:8080": f"localhost:{port}"})
    volumes = runtime_claims(cluster, SYSTEM_NAMESPACE)
    started: list[subprocess.Popen[bytes]] = []  # port-forward, log followers
    try:
        _walkthrough(cluster, admin, namespace, port, tmp_path, started)
    finally:
        for process in started:
            process.kill()
            process.wait()
        _uninstall_controller(cluster, admin, volumes, tmp_path)
    assert admin.used == set(admin.substitutions), "a README command changed"


def _walkthrough(cluster: NodeCluster, admin: Admin, namespace: str, port: int,
                 logs: Path, started: list[subprocess.Popen[bytes]]) -> None:
    rest = cluster.rest
    # Step 2: CRD, RBAC, admission policy, the namespace's label, the controller
    outputs = {}
    for command in commands(2):
        outputs[command] = admin.run(command, timeout=240)
    apply_controller = next(c for c in outputs if c.endswith("deploy/controller.yaml"))
    assert "deployment.apps/edl-controller created" in outputs[apply_controller]
    rollout = next(c for c in outputs if "rollout status" in c)
    assert "successfully rolled out" in outputs[rollout], outputs[rollout]
    assert rest.get("Namespace", namespace)["metadata"]["labels"]["edl.dev/served"] == "true"
    pods = controller_pods(cluster)
    assert len(pods) == 2 and all(p["spec"]["nodeName"] == cluster.node.name for p in pods)
    for pod in pods:  # the Deployment's securityContext, as the kubelet ran it
        processes = cluster.node.pod_processes(pod["metadata"]["uid"])
        assert {p.uid for p in processes} - {PAUSE_UID} == {10001}, processes
        assert not [f for p in processes if p.uid == 10001 for f in p.written()], processes
    # one replica leads: the Lease's holder is a controller pod (its --identity, POD_NAME)
    lease = next(c for c in outputs if "get lease" in c)
    # (a controller an earlier test stopped may have left its name until the Lease expires)
    names = {p["metadata"]["name"] for p in pods}
    holder = wait_until(lambda: (h := lease_holder(admin, lease)) in names and h, 60,
                        f"one of {names} holding the Lease")
    # Step 3: the example job, trained by the in-cluster controller on the node
    step3 = commands(3)
    wait_cmd = next(c for c in step3 if c.startswith("kubectl wait"))
    assert "trainingjob.edl.dev/digits-cluster created" in admin.run(step3[0])
    wait_tj(rest, namespace, JOB, lambda t: t["status"]["state"] == "Running", 180,
            f"{JOB} Running")
    table = admin.run(step3[1])
    assert table.split()[:7] == ["NAME", "STATE", "RUNNING", "DESIRED", "MIN", "MAX",
                                 "WAITING"], table
    # the node has room: the autoscaler grows the job past its guarantee
    grown = wait_until(lambda: (n := parallelism(rest, namespace, JOB) or 0) > 2 and n, 90,
                       f"{JOB} grown past 2 trainers")
    assert any(re.search(r"target trainers 2 -> \d", m) for m in events(
        cluster, namespace, "ScalingUp")), events(cluster, namespace, "ScalingUp")
    wide = admin.run(next(c for c in step3 if "-o wide" in c))
    assert {"PENDING", "IMAGE", "MESSAGE"} <= set(wide.split()), wide
    assert "ghcr.io/edl-dev/edl-runtime:0.1.0" in wide, wide
    assert "min-instance" in admin.run(next(c for c in step3 if "explain" in c))
    children = admin.run(next(c for c in step3 if "-l edl.dev/job=" in c))
    for kind, name in CHILDREN:
        word = {"Service": "service", "ReplicaSet": "replicaset.apps", "Job": "job.batch"}[kind]
        assert f"{word}/{name}" in children, children
    assert "pod/digits-cluster-master-" in children, children
    described = admin.run(next(c for c in step3 if "describe" in c))
    assert "ScalingUp" in described and "cluster load cpu" in described, described

    # the leader pod deleted while the job trains: on SIGTERM it releases the Lease (the
    # standby need not wait out its 15 s), the standby takes it and runs the job on
    (standby,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != holder]
    leader_log = follow(admin, holder, logs / f"{holder}.log")
    started.append(leader_log[0])
    deleted = time.monotonic()
    rest.delete("Pod", holder, SYSTEM_NAMESPACE)
    wait_until(lambda: lease_holder(admin, lease) == standby, 45, f"{standby} leads")
    takeover = time.monotonic() - deleted
    print(f"\nthe standby took the Lease {takeover:.1f} s after the leader's deletion")
    assert takeover < 10, (takeover, _ended(leader_log))

    # Step 4: the filler overflows the node; the job gives trainers back, then regrows
    step4 = commands(4)
    allocatable = sum(_cpu(n["status"]["allocatable"]["cpu"]) for n in rest.list("Node"))
    fill_line = next(c for c in step4 if c.startswith("FILL="))
    fill = int(admin.run(f'{fill_line}; echo "$FILL"').split()[-1])
    assert fill == int(allocatable * 2.5), (fill, allocatable)
    admin.variables["FILL"] = str(fill)
    for command in step4[1:3]:  # create the filler at 0, set its request
        admin.run(command)
    admin.run(next(c for c in step4 if "--replicas=$FILL" in c))
    wait_until(lambda: parallelism(rest, namespace, JOB) == 2, 90, f"{JOB} shrunk to 2")
    wait_until(lambda: events(cluster, namespace, "ScalingDown"), 30, "a ScalingDown Event")
    admin.run(next(c for c in step4 if "filler --replicas=0" in c))
    wait_until(lambda: (parallelism(rest, namespace, JOB) or 0) > 2, 90, f"{JOB} regrown")
    admin.run(next(c for c in step4 if "scale tj" in c))
    assert rest.get("TrainingJob", JOB, namespace)["spec"]["trainer"]["min-instance"] == 4
    # the README's word on /scale: its DESIRED is the guarantee
    header, row = admin.run(f"kubectl get tj {JOB} --subresource=scale").splitlines()[:2]
    assert dict(zip(header.split(), row.split(), strict=False))["DESIRED"] == "4", (header, row)

    # Step 3's last command: the job's end
    assert "condition met" in admin.run(wait_cmd, timeout=600)
    tj = rest.get("TrainingJob", JOB, namespace)
    assert tj["status"]["state"] == "Succeeded", tj["status"]
    done = trainer_pods(rest, namespace, JOB, "Succeeded")
    accuracies = [float(m.group(1)) for name in done
                  if (m := re.search(r"test accuracy ([0-9.]+)",
                                     pod_log(cluster, namespace, name)))]
    assert accuracies and min(accuracies) >= 0.95, accuracies
    print(f"{JOB}: grew to {grown}, Succeeded; accuracies {accuracies}")

    # Step 5: the controller's metrics through port-forward, then clean up
    step5 = commands(5)
    # up to the job's deletion: the uninstall after it would take the RBAC and admission
    # policy from the session's later tests (tests/e2e/test_doc_commands.py runs it)
    step5 = step5[:next(i for i, c in enumerate(step5) if c.startswith("kubectl delete tj")) + 1]
    forward = subprocess.Popen(
        ["sh", "-c", "exec " + admin.here(step5[0]).removesuffix("&").strip()],
        env={**os.environ, "KUBECONFIG": str(admin.kubeconfig)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(forward)
    metrics = wait_until(lambda: _ok(admin, step5[1]), 30, "metrics through port-forward")
    leader = re.search(r"^edl_leader (\S+)$", metrics, re.M)
    assert leader, metrics
    if float(leader.group(1)) == 1.0:
        assert "edl_scale_decisions_total" in metrics, metrics
    else:  # the README: a standby shows edl_leader 0 only
        assert metrics.strip() == leader.group(0), metrics
    for command in step5[2:]:
        admin.run(command)
    for kind, name in CHILDREN:
        wait_until(lambda k=kind, n=name: rest.find(k, n, namespace) is None, 60,
                   f"{kind} {name} garbage-collected")
    # the in-cluster controller releases its trainer pods' tracking finalizers
    wait_until(lambda: not rest.list("Pod", namespace, f"edl.dev/job={JOB}"), 90,
               "the job's pods removed")
    wait_until(lambda: not rest.list("Pod", namespace, "app=filler"), 60, "the filler removed")


def follow(admin: Admin, pod: str, path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`kubectl logs -f` of controller pod `pod` into `path`, to its end."""
    with path.open("wb") as out:
        return subprocess.Popen(["kubectl", "-n", SYSTEM_NAMESPACE, "logs", "-f", pod],
                                env={**os.environ, "KUBECONFIG": str(admin.kubeconfig)},
                                stdout=out, stderr=subprocess.STDOUT), path


def _ended(follower: tuple[subprocess.Popen[bytes], Path]) -> str:
    """The followed log, once its pod has ended (or 10 s on)."""
    process, path = follower
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
    process.kill()
    process.wait()
    return path.read_text(errors="replace")


def _ok(admin: Admin, command: str) -> str:
    with contextlib.suppress(AssertionError):
        return admin.run(command)
    return ""


def _cpu(value: str) -> float:
    return int(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _uninstall_controller(cluster: NodeCluster, admin: Admin, volumes: list[str],
                          logs: Path) -> None:
    """The Deployment and the runtime claims in edl-system go; the Lease is released, so
    the next test's controller leads at once. (Never `kubectl delete -k`: the base holds
    the CRD, whose deletion deletes every TrainingJob.) The replicas' logs, followed to
    their end, are kept in `logs`."""
    rest = cluster.rest
    followers = [follow(admin, p["metadata"]["name"], logs / f"{p['metadata']['name']}.log")
                 for p in controller_pods(cluster)]
    rest.delete("Deployment", "edl-controller", SYSTEM_NAMESPACE)
    wait_until(lambda: not rest.list("Pod", SYSTEM_NAMESPACE, CONTROLLER), 90,
               "the controller pods gone")
    ended = "\n".join(_ended(f)[-3000:] for f in followers)
    print(f"the controller replicas' logs: {logs}")
    try:
        wait_until(lambda: not (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
                   .get("spec", {}).get("holderIdentity"), 30, "the Lease released")
    except AssertionError as error:
        raise AssertionError(f"{error}; the replicas' last lines:\n{ended}") from None
    for index in range(len(volumes)):
        rest.delete("PersistentVolumeClaim", f"edl-runtime-{index}", SYSTEM_NAMESPACE)
    for volume in volumes:
        rest.delete("PersistentVolume", volume)

"""What the e2e tests share besides fixtures: the controller process, jobs and waits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.control_plane import ROOT
from e2e.rest import ApiError, Rest
from edl.procs import free_port
from polling import wait_until

EDL = str(Path(sys.executable).with_name("edl"))
SYSTEM_NAMESPACE = "edl-system"
# Fast loops for tests: a tick every second. The Lease keeps edl controller's production
# timing (15 s, renew deadline 10 s, retry 2 s; test_leader.py is the test of it): a
# shorter renew deadline only made a loaded machine's controller give its Lease up
# mid-test, and no other test waits for a Lease to expire.
# --log-requests: the tests read every API call's status in the log (no 403, 409 or 422)
# --trainer-priority-class= (none): the tests measure edl's own shrinking and growth, which
# kube-scheduler's preemption of the default class would race; test_pod_security.py and the
# GPU walkthrough run with the default class
CONTROLLER_ARGS = ["--interval=1", "--status-interval=0.5",
                   f"--lease-namespace={SYSTEM_NAMESPACE}", "--log-requests",
                   "--trainer-priority-class="]
DRY_RUN = "dryRun=All"  # in the request log line of a server-side dry-run
FORBIDDEN_MARKS = ("Forbidden", "forbidden", "403 Forbidden", "code=403", "\"code\":403")


# deploy/admission-policy.yaml: edl writes only in namespaces an admin labelled so
SERVED = {"edl.dev/served": "true"}


def served_namespace(name: str) -> dict[str, Any]:
    """A Namespace manifest edl serves (README step 3: the admin's label)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(SERVED)}}


def load_yaml(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / name).read_text()) if d]


@dataclass
class Controller:
    """One `edl controller` process and its log."""

    identity: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    # Byte ranges of the log where a 403 is expected (see `offset`), not a defect.
    excused: list[tuple[int, int]] = field(default_factory=list)

    def offset(self) -> int:
        """The log's current size: mark where an excused window starts or ends."""
        return self.log.stat().st_size

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def forbidden_lines(self) -> list[str]:
        data = self.log.read_bytes()
        for start, end in sorted(self.excused, reverse=True):
            data = data[:start] + data[end:]
        # a dry-run create's 403 is admission's answer about a trainer pod (a full quota,
        # a missing PriorityClass), read by the planner, not RBAC's (test_rbac: pod create)
        return [line for line in data.decode(errors="replace").splitlines()
                if any(mark in line for mark in FORBIDDEN_MARKS) and DRY_RUN not in line]


def install_edl(rest: Rest) -> None:
    """Apply edl's namespace, CRD (waiting until Established), RBAC and the trainers'
    PriorityClass, as an admin would (README step 2)."""
    rest.apply(load_yaml("namespace.yaml"))
    rest.apply(load_yaml("crd.yaml"))
    wait_until(lambda: _crd_established(rest), 60, "the TrainingJob CRD Established")
    rest.apply(load_yaml("rbac.yaml"))
    rest.apply(load_yaml("admission-policy.yaml"))
    rest.apply(load_yaml("priorityclass.yaml"))


def _crd_established(rest: Rest) -> bool:
    crd = rest.get("CustomResourceDefinition", "trainingjobs.edl.dev")
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def start_controller_process(kubeconfig: Path, log: Path, identity: str,
                             *args: str) -> Controller:
    """`edl controller` as a process outside the cluster, talking with `kubeconfig`."""
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
           "NO_PROXY": "127.0.0.1,localhost",
           "POD_NAME": identity}  # Events' reportingInstance, as in the Deployment
    env.pop("HTTPS_PROXY", None)
    env.pop("https_proxy", None)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [EDL, "controller", f"--listen=127.0.0.1:{port}", f"--identity={identity}", *args],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    return Controller(identity, proc, log, port)


def trainingjob(name: str, *, min_instance: int = 2, max_instance: int = 6,
                trainer_cpu: str = "500m", **spec: Any) -> dict[str, Any]:
    """The README's example job (deploy/example-trainingjob.yaml) renamed and resized."""
    job = load_yaml("example-trainingjob.yaml")[0]
    job["metadata"] = {"name": name}
    trainer = job["spec"]["trainer"]
    trainer["min-instance"], trainer["max-instance"] = min_instance, max_instance
    trainer["resources"]["requests"]["cpu"] = trainer_cpu
    job["spec"].update(spec)
    return job


def wait_tj(rest: Rest, namespace: str, name: str, check: Callable[[dict[str, Any]], Any],
            timeout: float = 90, label: str = "") -> Any:
    """Poll TrainingJob `name` until `check(obj)` is truthy; its value. On a time-out the
    error carries the last status seen, so a failure says what the job showed instead."""
    last: dict[str, Any] = {}

    def probe() -> Any:
        try:
            obj = rest.get("TrainingJob", name, namespace)
            last["status"] = obj.get("status")
            return check(obj)
        except (KeyError, TypeError, IndexError, ApiError):
            return None
    try:
        return wait_until(probe, timeout, label or f"TrainingJob {name}")
    except AssertionError as error:
        raise AssertionError(f"{error}; last status: {last.get('status')}") from None


def trainer_pods(rest: Rest, namespace: str, job: str, phase: str = "Running") -> list[str]:
    """Names of the job's trainer pods in `phase` that are not being deleted."""
    pods = rest.list("Pod", namespace, f"edl.dev/job={job},edl.dev/role=trainer")
    return sorted(p["metadata"]["name"] for p in pods
                  if p.get("status", {}).get("phase") == phase
                  and not p["metadata"].get("deletionTimestamp"))


def parallelism(rest: Rest, namespace: str, job: str) -> int | None:
    found = rest.find("Job", f"{job}-trainer", namespace)
    return None if found is None else found["spec"].get("parallelism")


def wait_trainers(rest: Rest, namespace: str, job: str, count: int, timeout: float = 90) -> None:
    """Until the trainer Job asks for `count` trainers and exactly that many run."""
    def settled() -> bool:
        return (parallelism(rest, namespace, job) == count
                and len(trainer_pods(rest, namespace, job)) == count)
    try:
        wait_until(settled, timeout, f"{job}: {count} trainers running")
    except AssertionError as error:
        raise AssertionError(
            f"{error}; now parallelism {parallelism(rest, namespace, job)}, running "
            f"{len(trainer_pods(rest, namespace, job))}") from None


def filler(rest: Rest, namespace: str, replicas: int, cpu: str = "500m") -> None:
    """The README's `filler` Deployment (pause pods requesting `cpu`), created or scaled."""
    rest.apply([{
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "filler", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "filler"}},
            "template": {
                "metadata": {"labels": {"app": "filler"}},
                "spec": {"containers": [{
                    "name": "pause", "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]},
            },
        },
    }])

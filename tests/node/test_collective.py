"""Issue 30, case 2: the collective examples grow and shrink between real pods.

Each test runs one example as a TrainingJob of 1-3 trainers of 500m on the node, and
makes room come and go as another tenant would: Deployments of pause pods (priority 0,
as the trainers with the tests' controller flags), which the Autoscaler makes room for
by shrinking the job and whose deletion it answers by growing it.

* `filler-a` is there before the job: room for 2 trainers, so the first world is 2;
* `filler-b` comes once that world trains: room for 1, the job shrinks to 1 trainer;
* both go: room for 3, the job grows to 3 trainers.

The scripts sleep after each step while their world is smaller than 3 (the live
example's `--step-pause`/`--pause-below-world`; the same two lines added to a copy of
the DDP example), so the job cannot finish before the growth, and finishes at full
speed after it. What is asserted comes from the cluster: the TrainingJob's status (its
desired trainers 2, then 1, then 3; Succeeded), the trainer Job, and the pods' own logs
through `pods/log` (the worlds formed, the scripts' epoch and accuracy lines, the live
world's measured pauses).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.helpers import wait_tj
from e2e.rest import ApiError, Rest
from edl.jobparser.collective_manifests import master_replica_set
from edl.jobparser.validation import validate_job
from node.cluster import (
    NodeCluster,
    filler,
    free_cpu,
    pod_log,
    runtime_volumes,
    state_claim,
)
from polling import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
IMAGE_EXAMPLES = "/home/edl/examples"  # where the runtime image has them
TRAINER_CPU = 500  # millicores
FULL = 3  # trainers once both fillers go; the scripts are paced below this world
pytestmark = pytest.mark.timeout(600)
# rank 0's lines once a world trains: an epoch's metrics; a restarted world's resume
# from the checkpoint; a re-formed live world's pause, printed at its first step
PROGRESS = re.compile(r"^(?:epoch=|resumed from epoch |resizes=)", re.M)

# The DDP example with a pause after each step while the world is smaller than FULL
DDP_SCRIPT = (EXAMPLES / "digits-ddp" / "train.py").read_text()
PACED_DDP = DDP_SCRIPT.replace(
    "            optimizer.step()\n",
    "            optimizer.step()\n"
    f"            if world_size < {FULL}:\n"
    "                time.sleep(0.1)\n",
).replace("import argparse\n", "import argparse\nimport time\n")
assert "time.sleep(0.1)" in PACED_DDP and "import time" in PACED_DDP, "the example's loop changed"


def note(what: str) -> None:
    """A timestamped line in the test's captured output (shown if it fails, or with -s)."""
    print(f"{time.strftime('%X')} {what}", flush=True)


def _cpu(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


class TrainerLogs:
    """Every trainer pod's log as last read through `pods/log`: a pod the Job deletes on
    a shrink keeps what was read before it went (a container's log only grows)."""

    def __init__(self, cluster: NodeCluster, namespace: str, job: str) -> None:
        self.cluster, self.namespace, self.job = cluster, namespace, job
        self.logs: dict[str, str] = {}

    def read(self) -> dict[str, str]:
        pods = self.cluster.rest.list("Pod", self.namespace,
                                      f"edl.dev/job={self.job},edl.dev/role=trainer")
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["status"].get("phase") in ("Running", "Succeeded", "Failed"):
                with contextlib.suppress(OSError):  # going: keep what was read
                    text = pod_log(self.cluster, self.namespace, name)
                    # a deleted pod's answer may be "unable to retrieve container logs"
                    if text.startswith(self.logs.get(name, "")):
                        self.logs[name] = text
        return self.logs

    def text(self) -> str:
        return "\n".join(self.read().values())


class Desired:
    """The TrainingJob's `status.trainers.desired`, each change in order."""

    def __init__(self, rest: Rest, namespace: str, job: str) -> None:
        self.rest, self.namespace, self.job = rest, namespace, job
        self.seen: list[int] = []

    def read(self) -> list[int]:
        try:
            status = self.rest.get("TrainingJob", self.job, self.namespace).get("status") or {}
        except ApiError:
            return self.seen
        desired = (status.get("trainers") or {}).get("desired")
        if desired and (not self.seen or self.seen[-1] != desired):
            self.seen.append(int(desired))
        return self.seen


def _volume_job(cluster: NodeCluster, job: dict[str, Any], example: str,
                extra_volumes: list[dict[str, Any]] | None = None,
                extra_mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The example's job on the node: its image, 1-FULL trainers of TRAINER_CPU, world
    sizes 1 to FULL, the runtime's volumes after the job's own."""
    volumes, mounts = runtime_volumes(cluster)
    spec = job["spec"]
    spec["image"] = cluster.image
    spec["collective"]["world-sizes"] = list(range(1, FULL + 1))
    trainer = spec["trainer"]
    trainer.update({"min-instance": 1, "max-instance": FULL,
                    "workspace": f"{IMAGE_EXAMPLES}/{example}"})
    trainer["resources"]["requests"]["cpu"] = f"{TRAINER_CPU}m"
    spec["volumes"] = [*(extra_volumes or []), *volumes]
    spec["volumeMounts"] = [*(extra_mounts or []), *mounts]
    return job


def _master_cpu(job: dict[str, Any]) -> int:
    """What the job's master pod asks for (the rendezvous store and its etcd sidecar)."""
    replica_set = master_replica_set(validate_job(job))
    return sum(_cpu(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
               for c in replica_set["spec"]["template"]["spec"]["containers"])


def _running(rest: Rest, namespace: str, app: str) -> bool:
    return any(p["status"].get("phase") == "Running" for p in rest.list("Pod", namespace,
                                                                         f"app={app}"))


def grow_and_shrink(cluster: NodeCluster, namespace: str, job: dict[str, Any],
                    world_of: Callable[[str], list[int]]) -> tuple[TrainerLogs, list[int]]:
    """Run `job` through room for 2, then 1, then FULL trainers (module docstring);
    `world_of(logs)` gives the world sizes formed so far, in order, from the pods' logs.
    Returns the logs and the desired counts the TrainingJob showed."""
    rest = cluster.rest
    name = job["metadata"]["name"]
    logs, desired = TrainerLogs(cluster, namespace, name), Desired(rest, namespace, name)
    room = free_cpu(cluster) - _master_cpu(job)
    assert room >= FULL * TRAINER_CPU, f"the node has {room}m for trainers, not {FULL}"
    # filler-a leaves room for 2.5 trainers, filler-b then for 1.5
    rest.create(filler(namespace, room - TRAINER_CPU * 5 // 2, "filler-a"), namespace)
    wait_until(lambda: _running(rest, namespace, "filler-a"), 60, "filler-a running")
    rest.create(job, namespace)
    note(f"{name} created; {room}m for trainers")

    def formed(expected: list[int], lines: int = -1) -> bool:
        """The last worlds formed are `expected`, with more than `lines` progress lines."""
        desired.read()
        text = logs.text()
        return world_of(text)[-len(expected):] == expected and len(PROGRESS.findall(text)) > lines

    def wait(check: Callable[[], Any], timeout: float, what: str) -> None:
        try:
            wait_until(check, timeout, what)
        except AssertionError as error:  # what the job and its pods showed instead
            tails = {pod: log.splitlines()[-12:] for pod, log in logs.read().items()}
            raise AssertionError(f"{error}; desired {desired.seen}, worlds "
                                 f"{world_of(logs.text())}, logs {tails}") from None

    def at_work(expected: list[int], timeout: float, what: str) -> None:
        """Wait for the worlds `expected`, then for a line of the script's progress in
        the last of them."""
        wait(lambda: formed(expected), timeout, what)
        done = len(PROGRESS.findall(logs.text()))
        wait(lambda: formed(expected, done), 120, f"the world of {expected[-1]} at work")
        note(f"world of {expected[-1]} at work; desired {desired.seen}")

    at_work([2], 240, "a world of 2 trainers")
    rest.create(filler(namespace, TRAINER_CPU, "filler-b"), namespace)
    at_work([2, 1], 120, "the world shrunk to 1 trainer for filler-b")
    wait(lambda: _running(rest, namespace, "filler-b"), 60, "filler-b running")
    for app in ("filler-a", "filler-b"):
        rest.delete("Deployment", app, namespace)
    wait(lambda: desired.read() and world_of(logs.text())[-1:] == [FULL], 240,
         f"the world grown to {FULL} once the fillers went")
    note(f"world of {FULL}; desired {desired.seen}")
    wait_tj(rest, namespace, name, lambda t: desired.read() and
            t["status"]["state"] == "Succeeded", 240, f"{name} Succeeded")
    note(f"{name} Succeeded")
    logs.read()
    return logs, desired.seen


def _assert_resized(desired: list[int], worlds: list[int]) -> None:
    """The TrainingJob wanted 2, then 1, then FULL trainers, and the worlds formed did
    the same (a first world of 1 may come before the second pod joins)."""
    assert desired[-3:] == [2, 1, FULL] or (
        desired[-4:-2] == [2, 1] and desired[-2:] == [2, FULL]), desired
    assert 2 in worlds, worlds
    after_two = worlds[worlds.index(2):]
    assert 1 in after_two and after_two[-1] == FULL, worlds


def _accuracy(text: str) -> tuple[float, int]:
    found = re.findall(r"^test accuracy ([0-9.]+) with (\d+) workers$", text, re.M)
    assert len(found) == 1, found  # rank 0 of the last world, once
    return float(found[0][0]), int(found[0][1])


def test_the_ddp_example_restarts_its_world_between_pods_as_it_shrinks_and_grows(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    """Restart mode: every resize restarts the workers of every pod, which resume from
    the checkpoint rank 0 wrote on a volume all trainer pods mount (a hostPath
    PersistentVolume here, ReadWriteMany, the job's first volume: EDL_CHECKPOINT_DIR's default)."""
    rest = node_cluster.rest
    start_controller("ddp")
    rest.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "paced-ddp"},
                 "data": {"train.py": PACED_DDP}}, namespace)
    volume = state_claim(node_cluster, namespace, "checkpoints", access="ReadWriteMany")
    shared = node_cluster.node.work / "state" / namespace / "checkpoints"
    try:
        job = yaml.safe_load((EXAMPLES / "digits-ddp" / "job.yaml").read_text())
        job["metadata"]["name"] = "ddp"
        job["spec"]["collective"]["resize-cooldown"] = 5
        job = _volume_job(
            node_cluster, job, "digits-ddp",
            [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}},
             {"name": "paced", "configMap": {"name": "paced-ddp"}}],
            [{"name": "checkpoints", "mountPath": "/checkpoints"},
             {"name": "paced", "mountPath": "/paced"}])
        trainer = job["spec"]["trainer"]
        trainer["workspace"] = "/paced"

        def worlds(text: str) -> list[int]:
            # torch's rendezvous rounds, as each agent reports them (one line per pod)
            rounds = {int(r): int(w) for r, w in re.findall(
                r"rendezvous: \{'round': (\d+), .*'world_size': (\d+)\}", text)}
            return [rounds[r] for r in sorted(rounds)]

        logs, desired = grow_and_shrink(node_cluster, namespace, job, worlds)
        text = "\n".join(logs.logs.values())
        _assert_resized(desired, worlds(text))
        # the script's own lines: after each restart, rank 0 resumed from the shared
        # checkpoint with the new world, and the last world reached the accuracy
        resumed = [int(n) for n in re.findall(r"^resumed from epoch \d+ with (\d+) workers$",
                                              text, re.M)]
        assert 1 in resumed and resumed[-1] == FULL, resumed
        accuracy, workers = _accuracy(text)
        assert workers == FULL and accuracy >= 0.95, (accuracy, workers)
        assert (shared / "edl-checkpoints" / "ddp" / "digits-ddp.pt").is_file()
    finally:
        rest.delete("PersistentVolume", volume)


def test_the_live_example_re_forms_its_world_between_pods_and_measures_the_pause(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    """Live mode (`spec.collective.live`): the world re-forms inside the running
    workers, across pods (the store through the master Service's DNS name, gloo between
    pod IPs). The new world's rank 0 measures each resize's pause and prints it."""
    start_controller("live")
    job = yaml.safe_load((EXAMPLES / "digits-ddp-live" / "job.yaml").read_text())
    job["metadata"]["name"] = "live"
    job = _volume_job(node_cluster, job, "digits-ddp-live")
    trainer = job["spec"]["trainer"]
    trainer["entrypoint"] += f" --step-pause 0.1 --pause-below-world {FULL}"
    # no volume to write: the checkpoint directory in the pod's own /tmp
    trainer["env"] = [{"name": "EDL_CHECKPOINT_DIR", "value": "/tmp/checkpoints"}]

    def worlds(text: str) -> list[int]:
        formed = {int(g): int(w) for g, w in re.findall(r"formed gen=(\d+) world=(\d+)", text)}
        return [formed[g] for g in sorted(formed)]

    logs, desired = grow_and_shrink(node_cluster, namespace, job, worlds)
    text = "\n".join(logs.logs.values())
    sizes = worlds(text)
    _assert_resized(desired, sizes)
    accuracy, workers = _accuracy(text)
    assert workers == FULL and accuracy >= 0.95, (accuracy, workers)
    epochs = re.findall(r"^epoch=(\d+) epochs=20 .* workers=(\d+)$", text, re.M)
    assert FULL in {int(w) for _, w in epochs}, epochs

    # each re-formed world's rank 0 printed its pause at its first step: the k-th pause
    # line of a pod is that of the k-th of its rank 0's last formations (a worker's
    # first formation has none; stdout and stderr may interleave out of order)
    formed = {int(g): int(w) for g, w in re.findall(r"formed gen=(\d+) world=(\d+)", text)}
    pauses: list[tuple[int, int, float]] = []
    for log in logs.logs.values():
        gens = [int(g) for g in re.findall(r"formed gen=(\d+) world=", log)]
        seconds = [float(s) for s in re.findall(r"^resizes=\d+ resize_pause_s=([0-9.]+)$",
                                                log, re.M)]
        assert len(seconds) <= len(gens), (gens, seconds)
        for gen, pause in zip(gens[len(gens) - len(seconds):], seconds, strict=True):
            before = [g for g in formed if g < gen]
            assert before, (gen, formed)
            pauses.append((formed[max(before)], formed[gen], pause))
    note("live pauses on pods (from, to, seconds): " + ", ".join(
        f"{a}->{b} {s:.3f}" for a, b, s in sorted(pauses, key=lambda p: p[:2])))
    print(f"live resize pauses on pods: {pauses}")
    assert len(pauses) == len(sizes) - 1, (pauses, sizes)  # one per re-formation
    assert any(a > b for a, b, _ in pauses) and any(a < b for a, b, _ in pauses), pauses
    assert all(0 < s < 30 for _, _, s in pauses), pauses

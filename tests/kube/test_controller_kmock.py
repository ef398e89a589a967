"""`edl controller` (kopf + lightkube + the shared Controller/Autoscaler) against kmock's
Kubernetes emulator over HTTP.

What this proves: the real kopf watch/handler code and the real lightkube client
drive the real Controller and Autoscaler, and the HTTP requests they make have
the intended effect on an API-shaped object store. What it does not prove:
kmock runs no controllers, so nothing creates pods for the trainer Job, no
garbage collector deletes children when a TrainingJob goes (we check the
ownerReferences it would use, and the Controller's own cleanup), and the CRD
schema is not enforced (tests/kube/test_crd.py checks the schema). Where pods
matter, the test plays scheduler and kubelet by creating bound, Running pods.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kubernetes_validate
import pytest
import pytest_asyncio
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from edl.kube.cluster import TrainingJobResource
from edl.kube.runner import ControllerProcess
from polling import eventually

ROOT = Path(__file__).resolve().parents[2]
TJ = kmock.resource("edl.dev/v1/trainingjobs")
JOBS = kmock.resource("batch/v1/jobs")
PODS = kmock.resource("v1/pods")
RS = kmock.resource("apps/v1/replicasets")
SVC = kmock.resource("v1/services")
EVENTS = kmock.resource("v1/events")



def stored(emulator: Any, resource: Any, name: str, namespace: str = "default") -> dict[str, Any]:
    key = (resource, namespace, name)
    if key not in emulator.objects or emulator.objects[key].deleted:
        raise KeyError(name)
    return _plain(emulator.objects[key])


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def exists(emulator: Any, resource: Any, name: str) -> bool:
    try:
        stored(emulator, resource, name)
    except KeyError:
        return False
    return True


def events(emulator: Any, reason: str | None = None) -> list[dict[str, Any]]:
    out = []
    for (resource, _, _), obj in list(emulator.objects.items()):
        if resource == EVENTS and not obj.deleted:
            event = _plain(obj)
            if reason is None or event.get("reason") == reason:
                out.append(event)
    return out


def example_job(name: str = "mnist", **trainer: Any) -> dict[str, Any]:
    job = yaml.safe_load((ROOT / "deploy/example-trainingjob.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["trainer"].update(trainer)
    return job


@pytest_asyncio.fixture
async def cluster_nodes(api: AsyncClient) -> None:
    for i in range(2):
        await api.create(Node.from_dict({
            "metadata": {"name": f"node-{i}"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
        }))


@pytest_asyncio.fixture
async def controller(
    running_controller: Any, cluster_nodes: None
) -> AsyncIterator[ControllerProcess]:
    async with running_controller() as process:
        yield process


async def create_job(api: AsyncClient, job: dict[str, Any]) -> None:
    await api.create(TrainingJobResource.from_dict(job), namespace="default")


async def test_create_makes_owned_children_status_and_a_scale_event(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    await create_job(api, example_job())
    await eventually(lambda: exists(emulator, JOBS, "mnist-trainer"))
    uid = stored(emulator, TJ, "mnist")["metadata"]["uid"]
    children = [(SVC, "mnist-master"), (RS, "mnist-master"), (RS, "mnist-pserver"),
                (JOBS, "mnist-trainer")]
    for resource, name in children:
        child = await eventually(lambda r=resource, n=name: stored(emulator, r, n))
        refs = child["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "edl.dev/v1", "kind": "TrainingJob", "name": "mnist",
                         "uid": uid, "controller": True, "blockOwnerDeletion": True}]
        # Every generated child is a valid Kubernetes object (strict: no unknown fields).
        kubernetes_validate.validate(child, desired_version="1.30.0", strict=True)

    # Two empty 4-CPU nodes and 250m trainers: the autoscaler grows the job to its max.
    await eventually(lambda: stored(emulator, JOBS, "mnist-trainer")["spec"]["parallelism"] == 6)
    scaled = await eventually(lambda: events(emulator, "ScalingUp"))
    message = scaled[0]["message"]
    assert message.startswith("target trainers 2 -> 6: ")
    assert "max_load_desired 0.97" in message and "cluster load cpu" in message
    assert scaled[0]["involvedObject"]["uid"] == uid

    status = await eventually(lambda: stored(emulator, TJ, "mnist")["status"]
                              if stored(emulator, TJ, "mnist").get("status", {}).get("replicas")
                              == 6 else None)
    assert status["observedGeneration"] == 1
    assert status["selector"] == "edl.dev/job=mnist,edl.dev/role=trainer"  # scale subresource
    assert status["trainers"]["desired"] == 6 and status["trainers"]["running"] == 0
    # edl's controller creates the managed trainer Job's pods itself (the emulator
    # schedules none: they stay Pending)
    job_uid = stored(emulator, JOBS, "mnist-trainer")["metadata"]["uid"]
    trainers = await eventually(lambda: [
        p for p in [_plain(o) for (r, _, _), o in list(emulator.objects.items())
                    if r == PODS and not o.deleted]
        if (p["metadata"].get("labels") or {}).get("edl.dev/job") == "mnist"
    ] if len([1 for (r, _, _), o in list(emulator.objects.items())
              if r == PODS and not o.deleted]) == 6 else None)
    assert all(p["metadata"]["ownerReferences"][0]["uid"] == job_uid for p in trainers)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Scaling"]["status"] == "True"
    assert conditions["Failed"]["status"] == "False"

    # The test plays scheduler + kubelet: two of those pods bound and Running.
    for pod in trainers[:2]:
        await api.patch(Pod, pod["metadata"]["name"], {
            "spec": {"nodeName": "node-0"}, "status": {"phase": "Running"}},
            namespace="default", patch_type=PatchType.MERGE)
    status = await eventually(
        lambda: stored(emulator, TJ, "mnist")["status"]
        if stored(emulator, TJ, "mnist")["status"]["trainers"]["running"] == 2 else None)
    assert status["state"] == "Running"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"

    # Metrics and health endpoints.
    base = f"http://127.0.0.1:{controller.http_port}"
    running_gauge = 'edl_job_trainers_running{job="mnist",namespace="default"} 2.0'
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/healthz") as health, http.get(f"{base}/readyz") as ready:
            assert (health.status, ready.status) == (200, 200)
            assert "leader" in await ready.text()
        for _ in range(100):  # the job gauges refresh once a second
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
            if running_gauge in text:
                break
            await asyncio.sleep(0.2)
    assert 'edl_cluster_allocatable{resource="cpu_milli"} 8000.0' in text
    assert 'edl_scale_decisions_total{kind="grow"}' in text
    assert running_gauge in text
    assert "edl_plan_duration_seconds_count" in text
    assert "edl_leader 1.0" in text


async def test_update_children_follow(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    await create_job(api, example_job())
    await eventually(lambda: stored(emulator, JOBS, "mnist-trainer")["spec"]["parallelism"] == 6)
    patch = {"spec": {"trainer": {"max-instance": 3},
                      "pserver": {"resources": {"requests": {"cpu": "300m"}}}}}
    await api.patch(TrainingJobResource, "mnist", patch, namespace="default",
                    patch_type=PatchType.MERGE)
    # The trainer Job's parallelism is clamped into the new range...
    await eventually(lambda: stored(emulator, JOBS, "mnist-trainer")["spec"]["parallelism"] == 3)
    # ...and the pserver ReplicaSet's pod template follows the edit.
    await eventually(lambda: stored(emulator, RS, "mnist-pserver")["spec"]["template"]["spec"]
                     ["containers"][0]["resources"]["requests"]["cpu"] == "300m")
    await eventually(lambda: stored(emulator, TJ, "mnist")["status"]["observedGeneration"] == 2)


async def test_bad_job_fails_with_the_validation_message_and_the_controller_carries_on(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    bad = example_job("broken")
    # requests above limits: the CRD schema cannot express this; JobParser rejects it.
    bad["spec"]["trainer"]["resources"]["requests"]["cpu"] = "2"
    await create_job(api, bad)
    status = await eventually(lambda: stored(emulator, TJ, "broken")["status"]
                              if stored(emulator, TJ, "broken").get("status", {}).get("state")
                              == "Failed" else None)
    assert "spec.trainer.resources.requests.cpu" in status["message"]
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "InvalidSpec")
    warning = await eventually(lambda: events(emulator, "InvalidSpec"))
    assert warning[0]["type"] == "Warning"
    assert not exists(emulator, JOBS, "broken-trainer")

    await create_job(api, example_job("good"))
    await eventually(lambda: exists(emulator, JOBS, "good-trainer"))

    # Fixing the bad job makes it run.
    await api.patch(TrainingJobResource, "broken",
                    {"spec": {"trainer": {"resources": {"requests": {"cpu": "250m"}}}}},
                    namespace="default", patch_type=PatchType.MERGE)
    await eventually(lambda: exists(emulator, JOBS, "broken-trainer"))
    await eventually(lambda: stored(emulator, TJ, "broken")["status"]["state"] != "Failed")


@pytest.mark.parametrize("odd", [
    {"spec": []},
    {"spec": {"trainer": "python train.py"}},
    {"spec": {"trainer": {"entrypoint": ["a", "list"], "min-instance": {"n": 1}}}},
    {"spec": None},
])
async def test_odd_shapes_fail_the_job_and_never_stop_the_controller(
    api: AsyncClient, emulator: Any, controller: ControllerProcess, odd: dict[str, Any]
) -> None:
    # The API server's structural schema would refuse these; kmock's emulator stores them,
    # which is what a controller must survive (an old CRD, a schema-less install, a bug).
    odd_job = {"apiVersion": "edl.dev/v1", "kind": "TrainingJob",
               "metadata": {"name": "odd", "namespace": "default"}, **odd}
    await create_job(api, odd_job)
    status = await eventually(lambda: stored(emulator, TJ, "odd")["status"]
                              if stored(emulator, TJ, "odd")["status"]["state"]
                              == "Failed" else None)
    assert "spec" in status["message"]
    assert controller.health.ready
    await create_job(api, example_job("good"))
    await eventually(lambda: exists(emulator, JOBS, "good-trainer"))
    assert not exists(emulator, JOBS, "odd-trainer")


async def test_delete_removes_children(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    await create_job(api, example_job())
    await eventually(lambda: exists(emulator, JOBS, "mnist-trainer"))
    await api.delete(TrainingJobResource, "mnist", namespace="default")
    await eventually(lambda: not any(exists(emulator, r, n) for r, n in [
        (JOBS, "mnist-trainer"), (RS, "mnist-pserver"), (RS, "mnist-master"),
        (SVC, "mnist-master")]))


async def test_conflicts_and_server_errors_are_retried(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    def scale_patch(request: Any) -> bool:
        return (request.resource == JOBS and request.method == "PATCH"
                and request.headers.get("Content-Type", "").startswith("application/merge")
                and isinstance(request.data, dict) and "spec" in request.data)

    def apply_patch(request: Any) -> bool:
        return (request.resource in (RS, SVC) and request.method == "PATCH"
                and request.headers.get("Content-Type", "").startswith("application/apply"))

    unavailable = emulator.fail_next(apply_patch, 503, times=3)
    conflict = emulator.fail_next(scale_patch, 409, times=2)
    overloaded = emulator.fail_next(scale_patch, 500, times=1)
    await create_job(api, example_job())
    await eventually(lambda: stored(emulator, JOBS, "mnist-trainer")["spec"]["parallelism"] == 6)
    assert (unavailable.hits, conflict.hits, overloaded.hits) == (3, 2, 1)
    for resource, name in [(RS, "mnist-master"), (RS, "mnist-pserver"), (SVC, "mnist-master")]:
        assert exists(emulator, resource, name)
    assert stored(emulator, TJ, "mnist")["status"]["state"] != "Failed"


async def test_broken_watches_resume(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    await create_job(api, example_job("first"))
    await eventually(lambda: exists(emulator, JOBS, "first-trainer"))
    fault = emulator.fail_next(lambda r: r.params.get("watch") == "true", 503, times=2)
    for resource in ("edl.dev/v1/trainingjobs", "v1/pods", "v1/nodes"):
        await emulator.expire_watches(resource)
    await create_job(api, example_job("second"))
    await eventually(lambda: exists(emulator, JOBS, "second-trainer"))
    await api.create(Node.from_dict({"metadata": {"name": "node-late"},
                                     "status": {"allocatable": {"cpu": "2", "memory": "1Gi"}}}))
    assert controller.cluster is not None
    await eventually(lambda: controller.cluster.state.node_count == 3)
    assert fault.hits >= 1
    assert controller.cluster.pod_reflector.lists >= 2


def test_example_job_copy_is_independent() -> None:
    # Guard for the helper above: tests must not share mutable example state.
    a, b = example_job(), example_job()
    b["spec"]["trainer"]["min-instance"] = 99
    assert a["spec"]["trainer"]["min-instance"] == 2
    assert copy.deepcopy(a) == a


async def test_collective_job_has_no_pservers_and_grows_only_to_allowed_sizes(
    api: AsyncClient, emulator: Any, controller: ControllerProcess
) -> None:
    job = yaml.safe_load((ROOT / "examples/digits-ddp/job.yaml").read_text())
    job["metadata"]["name"] = "ddp"
    job["spec"]["trainer"]["max-instance"] = 3  # world sizes 1, 2, 4: 3 trainers never
    await create_job(api, job)
    trainer = await eventually(lambda: stored(emulator, JOBS, "ddp-trainer"))
    master = await eventually(lambda: stored(emulator, RS, "ddp-master"))
    service = await eventually(lambda: stored(emulator, SVC, "ddp-master"))
    for child in (trainer, master, service):
        kubernetes_validate.validate(child, desired_version="1.30.0", strict=True)
    assert trainer["spec"]["template"]["spec"]["containers"][0]["command"] == ["edl", "agent"]
    assert master["spec"]["template"]["spec"]["containers"][0]["command"] == ["edl", "rendezvous"]
    assert service["spec"]["ports"][0]["name"] == "rendezvous"
    # room for 3 trainers of 250m on two empty 4-CPU nodes, but 2 is the largest allowed
    await eventually(lambda: stored(emulator, JOBS, "ddp-trainer")["spec"]["parallelism"] == 2)
    scaled = await eventually(lambda: events(emulator, "ScalingUp"))
    assert "collective: resize to 2 (snapped from 3)" in scaled[0]["message"]
    await asyncio.sleep(2)  # a few more ticks: the size holds, and no pserver appears
    assert stored(emulator, JOBS, "ddp-trainer")["spec"]["parallelism"] == 2
    assert not exists(emulator, RS, "ddp-pserver")

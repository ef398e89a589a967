"""The list+watch cache against kmock's emulator over HTTP (real lightkube client).

kmock keeps no history: a watch always starts with every current object as
ADDED, whatever resourceVersion is asked for, so "resume from a resourceVersion"
is exercised on the client side (we send it) but not verified on the server side.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod, ResourceQuota

from edl.accounting import inquire_resource
from edl.cluster.port import JobPods
from edl.kube.reflector import Reflector
from edl.kube.state import ClusterState, NodeStore, PodStore, QuotaStore
from polling import eventually


def node(name: str, cpu: str = "4", memory: str = "8Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": memory}}}


def pod(name: str, *, node_name: str | None = None, phase: str = "Pending", cpu: str = "500m",
        job: str | None = None, role: str = "trainer") -> dict[str, Any]:
    labels = {"edl.dev/job": job, "edl.dev/role": role} if job else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x",
                                            "resources": {"requests": {"cpu": cpu,
                                                                       "memory": "100Mi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": spec, "status": {"phase": phase}}


async def start(api: AsyncClient, state: ClusterState) -> tuple[Reflector, Reflector, list[Any]]:
    pods = Reflector(api, Pod, PodStore(state), min_backoff=0.05)
    nodes = Reflector(api, Node, NodeStore(state), namespace=None, min_backoff=0.05)
    tasks = [asyncio.create_task(pods.run()), asyncio.create_task(nodes.run())]
    await asyncio.wait_for(pods.synced.wait(), 20)
    await asyncio.wait_for(nodes.synced.wait(), 20)
    return pods, nodes, tasks


async def stop(tasks: list[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_list_then_watch_matches_a_full_inquiry(api: AsyncClient, emulator: Any) -> None:
    everything_nodes = [node("n1"), node("n2", cpu="8")]
    everything_pods = [pod("a", node_name="n1", phase="Running", job="j"),
                       pod("b", job="j"), pod("svc", role="service", job="s")]
    for obj in everything_nodes:
        await api.create(Node.from_dict(obj))
    for obj in everything_pods:
        await api.create(Pod.from_dict(obj), namespace="default")
    state = ClusterState()
    pods, _, tasks = await start(api, state)
    try:
        assert state.resources() == inquire_resource(everything_nodes, everything_pods)
        assert state.job_pods("default", "j") == JobPods(2, 1, 1, unscheduled=1, terminating=0)

        # Changes after the list arrive through the watch.
        late = pod("c", node_name="n2", phase="Running", cpu="2", job="j")
        await api.create(Pod.from_dict(late), namespace="default")
        await api.delete(Pod, "b", namespace="default")
        remaining = [everything_pods[0], everything_pods[2], late]
        expected = inquire_resource(everything_nodes, remaining)
        await eventually(lambda: state.resources() == expected)
        assert state.job_pods("default", "j") == JobPods(2, 2, 0, unscheduled=0, terminating=0)
        assert pods.lists == 1
    finally:
        await stop(tasks)


async def test_410_gone_relists(api: AsyncClient, emulator: Any) -> None:
    await api.create(Node.from_dict(node("n1")))
    state = ClusterState()
    pods, _, tasks = await start(api, state)
    try:
        await api.create(Pod.from_dict(pod("a", node_name="n1", phase="Running")),
                         namespace="default")
        await eventually(lambda: state.pod_count == 1)
        await emulator.expire_watches("v1/pods")
        await eventually(lambda: pods.lists == 2)
        # The relisted state is complete and the new watch delivers later changes.
        await api.create(Pod.from_dict(pod("b", node_name="n1", phase="Running")),
                         namespace="default")
        await eventually(lambda: state.pod_count == 2)
        assert state.resources().nodes.cpu_idle_milli == {"n1": 3000}
    finally:
        await stop(tasks)


async def test_broken_watch_resumes_after_server_errors(api: AsyncClient, emulator: Any) -> None:
    state = ClusterState()
    pods, _, tasks = await start(api, state)
    try:
        version_before = pods.resource_version
        fault = emulator.fail_next(
            lambda r: r.params.get("watch") == "true" and r.resource.plural == "pods", 503, times=2)
        await emulator.expire_watches("v1/pods")  # break the open stream
        await eventually(lambda: fault.hits == 2)
        await api.create(Pod.from_dict(pod("late", phase="Pending", job="j")), namespace="default")
        await eventually(lambda: state.job_pods("default", "j").pending == 1)
        assert pods.watch_restarts >= 3  # the 410 and the two 503s
        assert version_before is not None
    finally:
        await stop(tasks)


async def test_terminal_and_leaving_pods_do_not_count(api: AsyncClient) -> None:
    state = ClusterState()
    _, _, tasks = await start(api, state)
    try:
        done = pod("done", phase="Succeeded", job="j")
        await api.create(Pod.from_dict(done), namespace="default")
        leaving = pod("leaving", phase="Running", job="j")
        leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        # kmock drops an object marked for deletion unless a finalizer holds it (the kubelet's
        # grace period, which keeps a real terminating pod visible, is not emulated).
        leaving["metadata"]["finalizers"] = ["test/hold"]
        await api.create(Pod.from_dict(leaving), namespace="default")
        await api.create(Pod.from_dict(pod("ok", phase="Running", job="j")), namespace="default")
        await eventually(lambda: state.job_pods("default", "j").running == 1)
        assert state.job_pods("default", "j") == JobPods(1, 1, 0, unscheduled=0, terminating=1)
    finally:
        await stop(tasks)


def test_a_pod_with_a_bad_quantity_is_left_out_not_fatal() -> None:
    state = ClusterState()
    bad = pod("bad", cpu="lots")
    state.set_pod(bad)
    state.set_pod(pod("good", cpu="1"))
    assert state.bad_pods == 1
    assert state.resources().cpu_request_milli == 1000


def test_relist_forgets_what_is_no_longer_listed() -> None:
    nodes = [node("n1"), node("n2")]
    first = [pod("a", node_name="n1", phase="Running", job="j"), pod("b", job="j"),
             pod("c", node_name="n2", phase="Running")]
    state = ClusterState()
    state.replace_nodes(nodes)
    state.replace_pods(first)
    assert state.resources() == inquire_resource(nodes, first)
    second = [first[2], pod("d", node_name="n1", phase="Running", cpu="1")]
    state.replace_nodes(nodes[:1])
    state.replace_pods(second)
    assert state.resources() == inquire_resource(nodes[:1], second)
    assert state.job_pods("default", "j") == JobPods(0, 0, 0, 0, 0)
    assert state.pod_count == 2


def test_live_master_and_pserver_pods_are_counted_per_job() -> None:
    """The Controller asks a ReplicaSet why only while these counts fall short."""
    state = ClusterState()
    state.replace_pods([pod("m", job="j", role="master", phase="Running"),
                        pod("p0", job="j", role="pserver"), pod("p1", job="j", role="pserver"),
                        pod("t", job="j"), pod("other", job="k", role="master")])
    assert [state.role_pods("default", "j", r) for r in ("master", "pserver")] == [1, 2]
    leaving = pod("p1", job="j", role="pserver")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state.set_pod(leaving)
    state.set_pod(pod("m", job="j", role="master", phase="Failed"))
    assert [state.role_pods("default", "j", r) for r in ("master", "pserver")] == [0, 1]
    state.remove_pod("default", "p0")
    state.replace_pods([pod("other", job="k", role="master")])
    assert state.role_pods("default", "j", "pserver") == 0
    assert state.role_pods("default", "k", "master") == 1


def quota(name: str, cpu: str, used: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"hard": {"requests.cpu": cpu}},
            "status": {"hard": {"requests.cpu": cpu}, "used": {"requests.cpu": used}}}


async def test_resourcequotas_are_cached_with_what_they_have_used(api: AsyncClient) -> None:
    await api.create(ResourceQuota.from_dict(quota("q", "8", "2")), namespace="team")
    state = ClusterState()
    quotas = Reflector(api, ResourceQuota, QuotaStore(state), min_backoff=0.05)
    task = asyncio.create_task(quotas.run())
    try:
        await asyncio.wait_for(quotas.synced.wait(), 20)
        [room] = state.resources().quotas
        assert (room.namespace, room.name) == ("team", "q")
        assert room.hard == {"requests.cpu": 8000} and room.used == {"requests.cpu": 2000}
        await api.delete(ResourceQuota, "q", namespace="team")
        await eventually(lambda: state.resources().quotas == ())
    finally:
        await stop([task])


def test_a_relist_forgets_deleted_quotas_and_skips_unreadable_ones() -> None:
    state = ClusterState()
    store = QuotaStore(state)
    store.begin_replace()
    store.apply("ADDED", quota("a", "4", "0"))
    store.apply("ADDED", quota("bad", "lots", "0"))
    store.end_replace()
    assert [q.name for q in state.resources().quotas] == ["a"]
    store.begin_replace()
    store.end_replace()
    assert state.resources().quotas == ()

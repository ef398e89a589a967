"""The node tier: one real node (kubelet + containerd + runc + bridge CNI) registered to a
control plane of its own, shared by the session (`node_cluster`).

Pods run edl's runtime image (tools/node/images.py, imported with no registry); the Python
install it runs is mounted read-only from this machine through PersistentVolumes (so Pod
Security `restricted` admits the pods): `runtime_volumes` gives a TrainingJob's volumes and
mounts. `namespace` is a fresh namespace with those volumes' claims, deleted afterwards.

The tier is on by default and `make test` runs it in a step of its own (one node, one
pytest process); EDL_NODE=0 turns it off, and so does EDL_E2E=0 with the e2e suite. A
machine that cannot run a kubelet (not root, no cgroup v1 hierarchy) fails every test here
with one line naming the cause and the switch.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e.control_plane import ControlPlane, PlaneConfig, k8s_binaries, keep_or_remove
from e2e.helpers import (
    SYSTEM_NAMESPACE,
    Controller,
    install_edl,
    served_namespace,
)
from e2e.kueue import Kueue, start_kueue
from e2e.rest import ApiError, Rest
from node.cluster import NodeCluster, controllers, runtime_claims
from node.cluster_dns import coredns_binary
from node.node import Node, egress_config, images, node_binaries
from polling import wait_until

TRACKING_FINALIZER = "edl.dev/job-tracking"  # on every trainer pod edl creates
OFF = "EDL_NODE=0 turns the node tier off"
if os.environ.get("EDL_NODE", "1") == "0" or os.environ.get("EDL_E2E", "1") == "0":
    collect_ignore_glob = ["test_*.py"]


def unfit_machine() -> str:
    """Why this machine cannot run the test node ('' if it can)."""
    if os.geteuid() != 0:
        return "the node tier needs root (a kubelet, containerd and namespaces)"
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        return "the node tier needs the cgroup v1 memory hierarchy at /sys/fs/cgroup/memory"
    return ""


@pytest.fixture(scope="session")
def node_cluster(request: pytest.FixtureRequest) -> Iterator[NodeCluster]:
    why = unfit_machine()
    if why:
        pytest.fail(f"{why} ({OFF})", pytrace=False)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    work = Path(tempfile.mkdtemp(prefix=f"edl-node-{worker}-"))
    (work / "plane").mkdir()
    (work / "node").mkdir()
    try:
        bins, dns = node_binaries(), coredns_binary()
    except RuntimeError as error:
        pytest.fail(f"{str(error).splitlines()[-1]} ({OFF})", pytrace=False)
    pki = work / "plane" / "pki"
    egress = egress_config(work / "node" / "egress.yaml", work / "node" / "egress.sock")
    config = PlaneConfig(nodes=0, apiserver_args=(
        f"--egress-selector-config-file={egress}",
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
        # the node's name resolves nowhere; its IP is reachable through the egress proxy
        "--kubelet-preferred-address-types=InternalIP"),
        extra_controllers=("endpointslice-controller", "persistentvolume-binder-controller",
                           "persistentvolume-protection-controller",
                           "persistentvolumeclaim-protection-controller",
                           "root-ca-certificate-publisher-controller"))
    plane = ControlPlane(bin_dir=k8s_binaries(), work_dir=work / "plane", config=config)
    node = Node(bins=bins, work=work / "node", plane=plane, name=f"edl-node-{uuid.uuid4().hex[:6]}",
                dns_binary=dns)
    before = Node.machine_state()
    kueue: Future[Kueue] | None = None
    try:
        plane.start()
        rest = Rest(plane)
        install_edl(rest)
        if _uses_kueue(request.session):
            # Kueue needs only the plane: it starts while the node starts and takes its images
            pool = ThreadPoolExecutor(1, "kueue-start")
            kueue = pool.submit(start_kueue, plane)
            pool.shutdown(wait=False)
        node.start()
        tars = [images.runtime_image(work / "node"), images.etcd_image(work / "node"),
                images.controller_image(work / "node")]
        for tar in tars:
            node.import_image(tar)
        mounts = images.runtime_mounts()
        cluster = NodeCluster(plane, node, rest, plane.admin_kubeconfig,
                              f"localhost/edl-runtime:{images.version()}-node",
                              f"localhost/edl-etcd:{images.version()}-node", mounts,
                              controller_image=f"localhost/edl-controller:{images.version()}-node",
                              kueue=kueue)
        yield cluster
        _wait_deleted(rest, cluster.deleting)
    finally:
        if kueue is not None:
            kueue.exception()  # its start over (or failed) before the plane stops
        node.stop()
        plane.stop()
        left = node.leftovers()
        changed = {k: (v, after) for k, v in before.items()
                   if (after := Node.machine_state()[k]) != v}
        failed = request.session.testsfailed > 0
        note = keep_or_remove(plane, failed)
        if not failed:
            node.remove_work()
            with contextlib.suppress(OSError):
                work.rmdir()
        if note:
            print(f"\n{note}; node logs in {node.logs}", file=sys.stderr)
        assert not left, f"the test node left behind: {left}"
        assert not changed, f"the test node changed the machine (before, after): {changed}"


def _uses_kueue(session: pytest.Session) -> bool:
    """Whether a collected test uses the `kueue` fixture."""
    return any("kueue" in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session")
def kueue(node_cluster: NodeCluster) -> Kueue:
    """A running Kueue on the node tier's plane (e2e.kueue, as the e2e `kueue` fixture),
    started beside the node when a collected test uses it; stopped with the plane."""
    if node_cluster.kueue is None:
        return start_kueue(node_cluster.plane)
    return node_cluster.kueue.result()


@pytest.fixture
def namespace(node_cluster: NodeCluster) -> Iterator[str]:
    """A fresh namespace with claims on the runtime's volumes, deleted afterwards."""
    rest = node_cluster.rest
    name = f"node-{uuid.uuid4().hex[:6]}"
    rest.create(served_namespace(name))
    wait_until(lambda: rest.find("ServiceAccount", "default", name) is not None, 30,
               "the default ServiceAccount")
    volumes = runtime_claims(node_cluster, name)
    yield name
    _empty(rest, name)
    node_cluster.deleting.append(name)
    for volume in volumes:
        rest.delete("PersistentVolume", volume)


def _empty(rest: Rest, namespace: str) -> None:
    """Delete the namespace and its pods at once: the test is over, so no grace period is
    waited out and the next test finds the node's room free. The namespace itself goes in
    the background; the session waits for all of them at its end (`_wait_deleted`).

    The controller is stopped by now: edl's tracking finalizer on trainer pods goes as an
    admin removes it once edl no longer runs (docs/kubernetes.md), as tests/e2e does. A
    terminating namespace admits no new pod, so nothing replaces the ones deleted here.
    """
    rest.delete("Namespace", namespace)
    now = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}

    def no_pods() -> bool:
        _released(rest, namespace)
        with contextlib.suppress(ApiError):
            rest.call("DELETE", rest.path("Pod", namespace), now)
        return not rest.list("Pod", namespace)
    wait_until(no_pods, 60, f"the pods of namespace {namespace} deleted", interval=0.5)


def _wait_deleted(rest: Rest, namespaces: list[str]) -> None:
    wait_until(lambda: all(rest.find("Namespace", n) is None for n in namespaces), 120,
               f"namespaces {namespaces} deleted", interval=0.5)


def _released(rest: Rest, namespace: str) -> None:
    """Remove edl's tracking finalizer from the namespace's pods."""
    for pod in rest.list("Pod", namespace):
        finalizers = pod["metadata"].get("finalizers") or []
        if TRACKING_FINALIZER in finalizers:
            with contextlib.suppress(ApiError):
                rest.merge("Pod", pod["metadata"]["name"], {"metadata": {
                    "finalizers": [f for f in finalizers if f != TRACKING_FINALIZER]}},
                    namespace)


@pytest.fixture(scope="session")
def controller_kubeconfig(node_cluster: NodeCluster) -> Path:
    plane = node_cluster.plane
    return plane.service_account_kubeconfig(SYSTEM_NAMESPACE, "edl-controller",
                                            plane.work_dir / "edl-controller.kubeconfig")


@pytest.fixture
def start_controller(controller_kubeconfig: Path, node_cluster: NodeCluster,
                     tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    """`edl controller` as a process with the ServiceAccount's token, images set to the
    node's: stopped after the test."""
    with controllers(controller_kubeconfig, node_cluster, tmp_path) as (start, _):
        yield start

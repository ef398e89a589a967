"""End-to-end fixtures: one real control plane per session, `edl controller` as a process.

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) is
started once for the session; under pytest-xdist (`make test` runs `-n 4`) a session is
one worker, so every worker that runs an e2e test has a plane of its own and runs its e2e
tests one after another on it, as a plain `pytest` run does. A test may therefore count
the whole cluster (nodes, pods, the Lease): nothing of another test is on its plane, and
a test is written the ordinary way, with no grouping. `deploy/namespace.yaml`,
`deploy/crd.yaml`, `deploy/rbac.yaml` and `deploy/admission-policy.yaml` are applied as a
cluster admin would, and every test namespace is labelled `edl.dev/served=true`. The
controller runs outside the cluster with a token of the `edl-controller` ServiceAccount,
so the API server's RBAC authorizer and admission decide every call it makes exactly as
those files say; a `403` in its log fails the test.

EDL_E2E=0 turns this suite off (for a machine that cannot build the Kubernetes binaries);
otherwise a missing Go toolchain or a failed build is an error, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import cpu_profile
from e2e.control_plane import ControlPlane, PlaneConfig, k8s_binaries, keep_or_remove
from e2e.helpers import (
    CONTROLLER_ARGS,
    SYSTEM_NAMESPACE,
    Controller,
    install_edl,
    served_namespace,
    start_controller_process,
)
from e2e.kueue import Kueue, kueue_controller_account, start_kueue
from e2e.rest import ApiError, Rest
from polling import wait_until

TRACKING_FINALIZER = "edl.dev/job-tracking"  # on every trainer pod edl creates

if os.environ.get("EDL_E2E", "1") == "0":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The running control plane, with edl's namespace, CRD and RBAC applied."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    work = Path(tempfile.mkdtemp(prefix=f"edl-e2e-{worker}-"))
    cp = ControlPlane(bin_dir=k8s_binaries(), work_dir=work, config=PlaneConfig())
    try:
        cp.start()
        install_edl(Rest(cp))
        yield cp
    finally:
        cpu_profile.plane_components(plane_pids(cp))
        cp.stop()
        note = keep_or_remove(cp, failed=request.session.testsfailed > 0)
        if note:
            print(f"\n{note}", file=sys.stderr)


@pytest.fixture(scope="session")
def rest(plane: ControlPlane) -> Rest:
    return Rest(plane)


@pytest.fixture(scope="session")
def controller_kubeconfig(plane: ControlPlane) -> Path:
    """A kubeconfig with a token of ServiceAccount edl-system/edl-controller, nothing more."""
    return plane.service_account_kubeconfig(SYSTEM_NAMESPACE, "edl-controller",
                                            plane.work_dir / "edl-controller.kubeconfig")


@pytest.fixture
def namespace(rest: Rest, plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace edl serves for one test, deleted (and waited for) afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    rest.create(served_namespace(name))
    wait_until(lambda: _has_default_sa(rest, name), 30, "the default ServiceAccount")
    yield name
    rest.delete("Namespace", name)
    # The next test counts cluster capacity: wait until this one's pods are gone. The
    # controllers are stopped by now: the pods' tracking finalizer goes as an admin
    # removes it once edl no longer runs (docs/kubernetes.md).
    wait_until(lambda: _released(rest, name) and rest.find("Namespace", name) is None, 120,
               f"namespace {name} deleted")
    plane.check_running()


def _released(rest: Rest, namespace: str) -> bool:
    """Remove edl's tracking finalizer from the namespace's pods (True: none holds it)."""
    for pod in rest.list("Pod", namespace):
        finalizers = pod["metadata"].get("finalizers") or []
        if TRACKING_FINALIZER in finalizers:
            with contextlib.suppress(ApiError):
                rest.merge("Pod", pod["metadata"]["name"], {"metadata": {
                    "finalizers": [f for f in finalizers if f != TRACKING_FINALIZER]}},
                    namespace)
    return True


def plane_pids(cp: ControlPlane) -> list[tuple[str, int]]:
    """(name, pid) of the plane's running processes, for tests/cpu_profile.py."""
    pids = [(name, c.proc.pid) for name, c in cp.components.items() if c.proc is not None]
    etcd = cp.etcd._proc if cp.etcd is not None else None
    return [*pids, ("etcd", etcd.pid)] if etcd is not None else pids


def _has_default_sa(rest: Rest, namespace: str) -> bool:
    return rest.find("ServiceAccount", "default", namespace) is not None


@pytest.fixture
def start_controller(controller_kubeconfig: Path, plane: ControlPlane,
                     tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    """`start_controller(identity)` runs `edl controller` as the ServiceAccount; every process
    is stopped after the test, and any 403 in its log fails the test."""
    yield from _controllers(controller_kubeconfig, plane, tmp_path)


@pytest.fixture(scope="session")
def kueue(plane: ControlPlane) -> Kueue:
    """A running Kueue on the session's plane: its CRDs installed, its webhooks served on
    loopback with the suite's PKI (e2e.kueue); one per session, stopped with the plane."""
    return start_kueue(plane)


@pytest.fixture(scope="session")
def kueue_controller_kubeconfig(plane: ControlPlane, kueue: Kueue) -> Path:
    """A kubeconfig of ServiceAccount edl-system/edl-controller-kueue (e2e.kueue's
    `kueue_controller_account`): its own account, so that test_rbac still sees the default
    grants on a plane shared with Kueue tests."""
    return kueue_controller_account(plane)


@pytest.fixture
def start_kueue_controller(kueue_controller_kubeconfig: Path, plane: ControlPlane,
                           tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    """As `start_controller`, for `edl controller --kueue` with deploy/kueue-rbac.yaml."""
    yield from _controllers(kueue_controller_kubeconfig, plane, tmp_path, "--kueue")


def _controllers(kubeconfig: Path, plane: ControlPlane, tmp_path: Path,
                 *flags: str) -> Iterator[Callable[..., Controller]]:
    started: list[Controller] = []

    def start(identity: str = "replica-a", *extra: str) -> Controller:
        controller = start_controller_process(kubeconfig,
                                              tmp_path / f"controller-{identity}.log",
                                              identity, *CONTROLLER_ARGS, *flags, *extra)
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.stop()
    keep = plane.logs / "controllers"
    keep.mkdir(exist_ok=True)
    problems = []
    for controller in started:
        with contextlib.suppress(OSError):
            (keep / f"{tmp_path.name}-{controller.log.name}").write_text(controller.text())
        problems += [f"{controller.identity}: {line}" for line in controller.forbidden_lines()]
    assert not problems, "the controller was refused by RBAC:\n" + "\n".join(problems[:20])


